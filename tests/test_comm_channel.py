"""The shared-memory channel (explainer.distributed.device_communicators.shm) with threads standing in for ranks.

The channel is process-agnostic: each "rank" maps the segments itself, so threads exercise the real
/dev/shm protocol quickly. Real processes are covered in test_comm_processes.py.
"""

import os
import re
import stat
import threading
import time
import uuid

import pytest
import torch

from explainer.distributed.device_communicators import shm, shm_header

CHUNK = shm.MIN_CHUNK_BYTES


def _listing(tag):
    return sorted(n for n in os.listdir(shm.SHM_DIR) if tag in n)


def make_pair(world=2, **kw):
    tag = f"tchan{uuid.uuid4().hex[:8]}"
    names, barrier = [None] * world, threading.Barrier(world)
    groups, errors = [None] * world, []

    def exchange(r):
        def ex(name):
            names[r] = name
            barrier.wait(10)
            return list(names)
        return ex

    def build(r):
        try:
            groups[r] = shm.ShmGroup(f"{tag}-pp:0-[0-1]-cpushm", r, world, exchange=exchange(r),
                                     barrier=lambda: barrier.wait(10), **{"chunk_bytes": CHUNK, **kw})
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=build, args=(r,)) for r in range(world)]
    [t.start() for t in threads]
    [t.join(20) for t in threads]
    if errors:
        raise errors[0]
    return tag, groups


def transfer(a, b, items, dst=1, src=0):
    box = {}

    def send():
        try:
            a.send(items, dst)
        except BaseException as exc:  # noqa: BLE001
            box["send_error"] = exc

    t = threading.Thread(target=send)
    t.start()
    try:
        return b.recv(src)
    finally:
        t.join(20)
        if "send_error" in box:
            raise box["send_error"]


@pytest.fixture
def pair():
    tag, (a, b) = make_pair(timeout=5.0)
    yield a, b
    a.close()
    b.close()
    assert _listing(tag) == []


CASES = {
    "fp32": torch.randn(3, 5),
    "bf16": torch.randn(7, 3).to(torch.bfloat16),
    "int64": torch.arange(-5, 20, dtype=torch.int64).reshape(5, 5),
    "bool": torch.rand(4, 9) > 0.5,
    "zero_d": torch.tensor(3.25),
    "empty": torch.empty(0, 4),
    "empty_int": torch.empty(2, 0, 3, dtype=torch.int64),
}


def _equal(got, want):
    assert isinstance(got, dict) and list(got) == list(want)
    for (k, g), w in zip(got.items(), want.values()):
        assert g.dtype == w.dtype and g.shape == w.shape, k
        assert torch.equal(g, w), k


def test_round_trip_dtypes_and_shapes(pair):
    a, b = pair
    items = list(CASES.items())
    for i in range(0, len(items), 3):   # <= MAX_TENSORS per message
        batch = dict(items[i:i + 3])
        _equal(transfer(a, b, list(batch.items())), batch)


def test_payload_several_times_the_chunk_streams_through(pair):
    a, b = pair
    big = {"hidden_states": torch.randn(5 * CHUNK // 4 + 17), "residual": torch.randint(0, 9, (3 * CHUNK // 8 + 3,))}
    for _ in range(3):                  # repeated: sequence numbers keep advancing, halves alternate
        _equal(transfer(a, b, list(big.items())), big)
    nbytes = sum(t.numel() * t.element_size() for t in big.values())
    assert a.ctrl[0][shm.sent_slot(1)] >= 3 * (nbytes // a.chunk)    # many chunks per message
    assert b.ctrl[1][shm.acked_slot(0)] == a.ctrl[0][shm.sent_slot(1)]
    back = {"x": torch.randn(CHUNK)}    # and the other direction on the same channel
    _equal(transfer(b, a, list(back.items()), dst=0, src=1), back)


def test_small_big_small_and_raw_bytes_keep_headers_right(pair):
    """A streamed message and a raw hand-off overwrite the start of both halves: the sender must write
    the small layout's header again (it skips a header a half still holds) and the receiver re-learn it."""
    a, b = pair
    small = {"hidden_states": torch.randn(64), "residual": torch.randn(64)}
    big = {"hidden_states": torch.randn(3 * CHUNK // 4)}
    for msg in (small, small, big, small, small, big, small):
        _equal(transfer(a, b, list(msg.items())), msg)
    _equal(transfer(a, b, list(small.items())), small)   # now both halves hold the small header
    raw = os.urandom(4096)
    a.send_raw(memoryview(raw), 1)
    b.recv_raw(memoryview(bytearray(4096)), 0)
    for _ in range(3):                                    # both halves after the raw bytes
        _equal(transfer(a, b, list(small.items())), small)

def test_empty_message(pair):
    a, b = pair
    assert transfer(a, b, []) == {}


def test_a_changed_layout_with_a_header_of_the_same_length_is_parsed_again(pair):
    """The receiver compares the header in place against the layout it expects: a new shape with the
    same number of dims (same header length, other bytes) must be parsed, never taken for the old one."""
    a, b = pair
    flat, square = {"h": torch.arange(16.0)}, {"h": torch.arange(16.0).reshape(4, 4)}
    wide = {"h": torch.arange(16.0).reshape(2, 8)}
    for msg in (flat, flat, square, wide, square, square, flat):      # both halves, back and forth
        got = transfer(a, b, list(msg.items()))
        assert got["h"].shape == msg["h"].shape and torch.equal(got["h"], msg["h"])


@pytest.mark.parametrize("value, words", [
    ("text", ["'note'", "holds a str", "accepted"]),
    ([1, 2], ["'note'", "holds a list"]),
    (torch.randn(4, 4).t(), ["'note'", "not contiguous"]),
    (torch.zeros(2, dtype=torch.float8_e4m3fn), ["'note'", "dtype torch.float8_e4m3fn"]),
])
def test_rejects_what_it_cannot_carry(pair, value, words):
    a, _ = pair
    with pytest.raises(shm.ShmPayloadError) as info:
        a.send([("ok", torch.zeros(1)), ("note", value)], 1)
    for w in words:
        assert w in str(info.value)
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, ValueError)


def test_rejects_too_many_tensors_repeated_keys_and_bad_peer(pair):
    a, _ = pair
    with pytest.raises(shm.ShmPayloadError, match="key 'x' appears twice"):
        a.send([("x", torch.zeros(1)), ("x", torch.ones(1))], 1)
    with pytest.raises(shm.ShmPayloadError, match=r"7 tensors is more than .*0\.\.6"):
        a.send([(f"t{i}", torch.zeros(1)) for i in range(7)], 1)
    with pytest.raises(ValueError, match="accepted are group ranks 0..1 other than this rank 0"):
        a.send([], 0)


def test_segment_is_0600_whatever_the_umask_and_named_from_the_group():
    old = os.umask(0)
    try:
        tag, (a, b) = make_pair(unlink_after_join=False)
    finally:
        os.umask(old)
    try:
        for g in (a, b):
            assert re.fullmatch(rf"{re.escape(tag)}-pp:0-\[0-1\]-cpushm_{g.rank}-{os.getpid()}-[0-9a-f]{{8}}", g.name), g.name
            mode = os.stat(os.path.join(shm.SHM_DIR, g.name)).st_mode
            assert stat.S_IMODE(mode) == 0o600
        assert len(_listing(tag)) == 2
    finally:
        a.close()
        b.close()
    assert _listing(tag) == []


def test_names_unlinked_right_after_join():
    tag, (a, b) = make_pair()
    assert _listing(tag) == []          # mapped by everyone, so the names are no longer needed
    a.close()
    b.close()


def test_recv_without_sender_times_out_naming_the_peer(pair):
    a, b = pair
    b.timeout = 0.5
    t = time.monotonic()
    with pytest.raises(TimeoutError, match=r"rank 1 waited 0\.5s for group rank 0 \(pid \d+\) to publish data"):
        b.recv(0)
    assert time.monotonic() - t < 3


def test_sender_blocked_by_closed_receiver_raises_peer_gone(pair):
    a, b = pair
    b.close()
    t = time.monotonic()
    with pytest.raises(shm.PeerGoneError, match="group rank 1 .* closed the channel"):
        a.send([("x", torch.zeros(3 * CHUNK))], 1)    # needs acks the closed peer never gives
    assert time.monotonic() - t < 3


def test_exception_during_setup_unlinks():
    tag = f"tchan{uuid.uuid4().hex[:8]}"

    def bad_exchange(name):
        assert _listing(tag) == [name]
        raise RuntimeError("exchange failed")
    with pytest.raises(RuntimeError, match="exchange failed"):
        shm.ShmGroup(f"{tag}-pp", 0, 2, exchange=bad_exchange, barrier=lambda: None)
    assert _listing(tag) == []


def test_missing_peer_segment_is_vllms_errno_2():
    tag = f"tchan{uuid.uuid4().hex[:8]}"
    with pytest.raises(RuntimeError, match="open shm in SHMManager failed. errno: 2"):
        # a well-formed name (vLLM derives it from the group name) whose segment does not exist
        shm.ShmGroup(f"{tag}-pp", 0, 2, exchange=lambda n: [n, f"{tag}-pp_1-{os.getpid()}-0123abcd"],
                     barrier=lambda: None)
    assert _listing(tag) == []


def test_bad_arguments_name_the_accepted_range():
    ok = dict(exchange=lambda n: [n], barrier=lambda: None)
    with pytest.raises(ValueError, match=r"world size 9: .* 1\.\.8"):
        shm.ShmGroup("x", 0, 9, **ok)
    with pytest.raises(ValueError, match="chunk_bytes 1000: accepted are multiples of 64"):
        shm.ShmGroup("x", 0, 1, chunk_bytes=1000, **ok)
    with pytest.raises(ValueError, match="timeout 0: accepted"):
        shm.ShmGroup("x", 0, 1, timeout=0, **ok)


def test_corrupt_header_from_a_peer_is_an_error_not_a_crash(pair):
    a, b = pair
    base = a.outbox(1, 1, 0)
    bad = shm_header.HDR.pack(0xDEAD, 1, shm_header.HDR.size + shm_header.ENTRY.size + 8, 0) + shm_header.ENTRY.pack(0, 1, 0, 1 << 40)
    a._maps[0][base:base + len(bad) + 8] = bad + (1).to_bytes(8, "little")   # 1 float claiming 1 TiB
    a.ctrl[0][shm.sent_slot(1)] = 1                     # publish it by hand
    with pytest.raises(RuntimeError, match="corrupt header from group rank 0"):
        b.recv(0)
