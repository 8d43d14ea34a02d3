"""vLLM ``vllm/distributed/device_communicators/``: the CPU communicator and its shared-memory channel
(``shm`` with its header codec, segment bookkeeping and wait policy)."""
