"""The shared-memory channel's binary header (explainer.distributed.device_communicators.shm_header), the hot path's
behaviour (fresh tensors every message, raw hand-off) and the wait policy's arguments. No timings."""

import os
import struct
import time

import pytest
import torch

from explainer.bench.load import busy_load
from explainer.distributed.device_communicators import shm_header as H, shm_wait
from test_comm_channel import make_pair, transfer

SHAPES = [(), (0,), (1,), (1, 1), (3, 0, 2), (1, 512), (512, 1), (2, 3, 4), tuple([1] * H.MAX_DIMS)]


@pytest.mark.parametrize("dtype", H.DTYPES)
def test_header_round_trips_every_dtype_and_shape(dtype):
    items = [(f"k{i}", torch.zeros(s, dtype=dtype)) for i, s in enumerate(SHAPES[:H.MAX_TENSORS])]
    layout = H.build_layout(items)
    back = H.parse(layout.header)
    assert back.keys == tuple(k for k, _ in items)
    assert back.dtypes == (dtype,) * len(items)
    assert back.shapes == tuple(tuple(t.shape) for _, t in items)
    assert back.nbytes == layout.nbytes == tuple(t.numel() * t.element_size() for _, t in items)
    assert back.offsets == layout.offsets and back.total == layout.total
    assert all(o % H.ALIGN == 0 for o, n in zip(back.offsets, back.nbytes) if n)


def test_unicode_keys_and_cached_layouts():
    codec = H.HeaderCodec()
    items = [("hidden_états", torch.randn(2, 3)), ("残差", torch.randn(2, 3).bfloat16())]
    first, ptrs = codec.encode(items)
    assert ptrs == [t.data_ptr() for _, t in items]
    clones = [(k, t.clone()) for k, t in items]
    again, ptrs = codec.encode(clones)
    assert again is first and ptrs == [t.data_ptr() for _, t in clones]     # same layout, other tensors
    assert codec.encode([(k, t.reshape(3, 2)) for k, t in items])[0] is not first
    assert codec.decode(first.header) is codec.decode(bytes(first.header))
    assert codec.decode(first.header).keys == ("hidden_états", "残差")


def test_empty_creates_fresh_contiguous_tensors_of_the_layout():
    for shape in SHAPES:
        layout = H.build_layout([("x", torch.zeros(shape, dtype=torch.float16))])
        a, b = layout.empty()[0], layout.empty()[0]
        assert a.shape == shape and a.dtype == torch.float16 and a.is_contiguous()
        assert a.stride() == torch.empty(shape).stride()
        assert a.numel() == 0 or a.data_ptr() != b.data_ptr()


@pytest.mark.parametrize("value, words", [
    ("text", ["'x'", "holds a str"]),
    (3.5, ["'x'", "holds a float"]),
    (None, ["'x'", "holds a NoneType"]),
    (torch.randn(4, 4).t(), ["'x'", "not contiguous"]),
    (torch.randn(4).expand(3, 4), ["'x'", "not contiguous"]),
    (torch.zeros(2, device="meta"), ["'x'", "device meta"]),
    (torch.zeros(2, dtype=torch.float8_e5m2), ["'x'", "dtype torch.float8_e5m2"]),
    (torch.zeros([1] * (H.MAX_DIMS + 1)), ["'x'", f"{H.MAX_DIMS + 1} dims"]),
])
def test_bad_values_are_a_clear_error_even_after_a_good_layout_was_cached(value, words):
    codec = H.HeaderCodec()
    codec.encode([("x", torch.zeros(2))])                # the cache must not vouch for what it never saw
    with pytest.raises(H.ShmPayloadError) as info:
        codec.encode([("x", value)])
    assert all(w in str(info.value) for w in words), str(info.value)
    assert "accepted" in str(info.value)


def test_too_many_tensors_and_bad_keys():
    codec = H.HeaderCodec()
    with pytest.raises(H.ShmPayloadError, match=rf"{H.MAX_TENSORS + 1} tensors .* 0\.\.{H.MAX_TENSORS}"):
        codec.encode([(f"t{i}", torch.zeros(1)) for i in range(H.MAX_TENSORS + 1)])
    for key in (3, ["list"], "k" * (H.MAX_KEY_BYTES + 1)):
        with pytest.raises(H.ShmPayloadError, match="accepted keys are str"):
            codec.encode([(key, torch.zeros(1))])


def test_parse_rejects_inconsistent_headers():
    good = H.build_layout([("x", torch.zeros(4))]).header
    entry_at = H.HDR.size
    bad = {
        "magic": b"\0\0\0\0" + good[4:],
        "truncated": good[:-1],
        "dtype code": good[:entry_at] + bytes([200]) + good[entry_at + 1:],
        "byte count": good[:entry_at] + H.ENTRY.pack(0, 1, 1, 1 << 40) + good[entry_at + H.ENTRY.size:],
        "total": good[:8] + struct.pack("<Q", 1) + good[16:],
        "key utf-8": good[:-1] + b"\xff",
    }
    for what, header in bad.items():
        with pytest.raises(ValueError):
            H.parse(header)
            pytest.fail(what)


@pytest.fixture
def pair():
    tag, (a, b) = make_pair(timeout=5.0)
    yield a, b
    a.close()
    b.close()


def test_every_message_arrives_in_fresh_tensors(pair):
    a, b = pair
    got = []
    for i in range(5):                                    # same layout each time: the pre-allocated path
        got.append(transfer(a, b, [("h", torch.full((4, 8), float(i))), ("r", torch.arange(i, i + 3))]))
    for i, message in enumerate(got):                     # earlier results are untouched by later messages
        assert torch.equal(message["h"], torch.full((4, 8), float(i)))
        assert torch.equal(message["r"], torch.arange(i, i + 3))
    ptrs = [t.data_ptr() for message in got for t in message.values()]
    assert len(set(ptrs)) == len(ptrs)
    got[0]["h"].add_(1)                                   # writable, and writing does not disturb the next
    assert torch.equal(transfer(a, b, [("h", torch.ones(4, 8))])["h"], torch.ones(4, 8))


def test_layout_change_and_views_of_sent_tensors(pair):
    a, b = pair
    base = torch.arange(64, dtype=torch.int32)
    for items in ([("x", base[8:16])], [("x", base[:32].view(4, 8)), ("y", torch.tensor(True))], [("x", base[8:16])]):
        got = transfer(a, b, items)
        assert [(k, t.dtype, t.shape) for k, t in got.items()] == [(k, t.dtype, t.shape) for k, t in items]
        assert all(torch.equal(g, w) for g, (_, w) in zip(got.values(), items))


def test_raw_hand_off_carries_bytes_both_ways(pair):
    a, b = pair
    data, out = os.urandom(4096), memoryview(bytearray(4096))
    for _ in range(3):
        a.send_raw(memoryview(data), 1)
        b.recv_raw(out, 0)
        assert bytes(out) == data
        b.send_raw(out, 0)
        back = memoryview(bytearray(4096))
        a.recv_raw(back, 1)
        assert bytes(back) == data


def test_wait_policy_arguments_and_phases():
    with pytest.raises(ValueError, match="accepted are 0 <= spin_us <= yield_us"):
        shm_wait.WaitPolicy(spin_us=10, yield_us=5)
    with pytest.raises(ValueError, match="poll_ms >= 1"):
        shm_wait.WaitPolicy(poll_ms=0)
    ctrl = memoryview(bytearray(16)).cast("q")
    ctrl[1] = 5
    assert shm_wait.spin_then_yield(ctrl, 1, 5)           # already there
    assert not shm_wait.spin_then_yield(ctrl, 1, 6, shm_wait.WaitPolicy(spin_us=0, yield_us=50))   # give up: sleep next



def test_a_contended_yield_makes_the_next_waits_spin_longer_then_phase_2_returns(monkeypatch):
    """A yield that takes a whole slice (another task held the core) ends the wait (sleep next) and starts
    a back-off: for backoff_ms, each wait spins backoff_spin_us before its one yield; then phase 2 returns
    (yielding from spin_us on). Read from when each wait's first yield happens."""
    yields = []

    def slow_yield():                                     # as if a busy loop ran for its slice
        yields.append(time.perf_counter())
        time.sleep(0.002)
    monkeypatch.setattr(shm_wait.os, "sched_yield", slow_yield)
    monkeypatch.setattr(shm_wait, "_yield_off_until", 0.0)
    policy = shm_wait.WaitPolicy(spin_us=0, yield_us=50_000, contended_us=50, backoff_ms=150, backoff_spin_us=20_000)
    ctrl = memoryview(bytearray(16)).cast("q")            # the awaited counter never arrives

    def first_yield_after() -> float:
        before, t = len(yields), time.perf_counter()
        assert not shm_wait.spin_then_yield(ctrl, 1, 1, policy)     # time to sleep
        assert len(yields) == before + 1                  # exactly one (slow) yield per wait
        return yields[-1] - t
    assert first_yield_after() < 0.015                    # phase 2 from the start (spin_us=0)
    for _ in range(2):
        assert first_yield_after() >= 0.020               # backing off: the 20 ms spin comes first
    time.sleep(0.16)                                      # the back-off is over
    assert first_yield_after() < 0.015
    ctrl[1] = 1
    assert shm_wait.spin_then_yield(ctrl, 1, 1, policy)   # data there: no wait at all

def test_busy_load_ends_its_processes():
    with busy_load(2, max_seconds=30) as pids:
        assert len(pids) == 2 and all(os.path.exists(f"/proc/{p}") for p in pids)
    for p in pids:
        if os.path.exists(f"/proc/{p}/stat"):             # reaped: gone, or at worst a zombie for an instant
            with open(f"/proc/{p}/stat") as f:
                assert f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    with pytest.raises(ValueError, match="accepted 1..64"):
        with busy_load(0):
            pass


def test_bench_loaded_bad_count_is_a_one_line_error(capsys):
    from explainer.cli import main
    assert main(["bench", "--only", "comm", "--loaded", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --loaded 0: accepted 1..64 busy-loop processes"]


@pytest.mark.slow
def test_comm_bench_reports_the_floor_and_a_breakdown_that_adds_up():
    from explainer.bench import comm
    m = comm.measure(quick=True, sizes=(4096,))          # structure only: timings are never asserted
    assert m["latency"]["floor"] > 0 and m["latency"]["shm"] > 0
    parts = comm.breakdown(m)
    assert [name for name, _, _ in parts][:2] == ["header encode (send)", "copy in (send)"]
    counted, (overlapped,) = parts[:-1], parts[-1:]
    assert overlapped[0] == comm.OVERLAPPED and overlapped[1] > 0     # shown apart: it runs during the wait
    assert sum(us for _, us, _ in counted) == pytest.approx(m["latency"]["shm"] * 1e6)
    assert sum(share for _, _, share in counted) == pytest.approx(1.0)
