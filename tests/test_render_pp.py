"""The PP renderers (render.pp_*): DOT sources and HTML frames read from real PP runs (no mocks: the scenarios run the engine)."""

import re

import pytest

from explainer import scenario
from explainer.config import EngineConfig
from explainer.render.pp_frames import key_events
from explainer.render.pp_stages import stages_dot
from explainer.render.pp_tables import accuracy_table_html, bytes_table_html, sc_bytes
from explainer.render.pp_trace import crossing, diverged_fields, never_sent
from explainer.render.pp_views import event_dot, rank_views_html
from explainer.trace import Event, Trace, Transfer


@pytest.fixture(scope="module")
def runs():
    return {n: scenario.run(n) for n in ("pp1", "pp2-pre-fix", "pp2-pre-fix-int64", "pp2-state-sync")}


def _highlighted(html: str) -> list[str]:
    return re.findall(r'class="xp-diverged" data-field="([a-z_]+)"', html)


def test_stages_dot_generic_draws_the_never_sent_state_dashed_red(runs):
    t = runs["pp2-pre-fix-int64"].trace
    src = stages_dot(t)
    assert src.startswith("digraph pp_stages {")
    for node in ("r0_embed", "r0_sc", "r0_layers", "r0_state", "r1_layers", "r1_head", "r1_sampler", "r1_state"):
        assert f"  {node} [" in src or f"    {node} [" in src
    assert "layers 0..1" in src and "layers 2..3" in src
    assert never_sent(t) == ["is_encoder_phase", "self_conditioning_embeds", "draft_tokens"]
    stale = [line for line in src.splitlines() if "never sent" in line]
    assert len(stale) == 1 and "r1_state -> r0_state" in stale[0] and "style=dashed" in stale[0]
    assert "#D55E00" in stale[0] and "✗ never sent (STALE on rank 0)" in stale[0]
    for f, shape in (("is_encoder_phase", "bool [n]"), ("self_conditioning_embeds", "float32 [n, CL, H]"),
                     ("draft_tokens", "int64 [n, CL]")):
        assert f"{f}  {shape}" in stale[0]
    # the real transfers: labels carry the dtype, shape and bytes the trace recorded
    c = crossing(t)
    assert c["hidden_states"]["dtype"] == "float32" and c["sampled_token_ids"]["dtype"] == "int64"
    assert c["sampled_token_ids"]["shape"] == [1, t.meta["canvas_length"] + 1]
    assert f"hidden_states\\n  float32 {c['hidden_states']['shape']}  {c['hidden_states']['bytes']:,} B/step" in src
    assert f"sampled_token_ids\\n  int64 [1, 9]  {c['sampled_token_ids']['bytes']} B/step" in src
    assert "num_sampled_num_rejected\\n  int32 [2, 1]  8 B/step" in src


def test_stages_dot_state_sync_draws_those_edges_as_real_transfers(runs):
    t = runs["pp2-state-sync"].trace
    src = stages_dot(t)
    assert never_sent(t) == [] and "never sent" not in src and "style=dashed" not in src
    assert "state sync (#52015)" in src
    assert "self_conditioning_embeds\\n  float32 [1, 8, 64]  2,048 B/step" in src
    assert "is_encoder_phase\\n  bool [1]  1 B/step" in src and "draft_tokens\\n  int64 [1, 8]  64 B/step" in src


def test_stages_dot_pp1_has_one_stage_and_no_crossing(runs):
    src = stages_dot(runs["pp1"].trace)
    assert "cluster_rank0" in src and "cluster_rank1" not in src and "->" in src
    assert "IntermediateTensors" not in src and "never sent" not in src and "layers 0..3" in src


def test_stages_dot_from_a_config_is_symbolic():
    src = stages_dot(EngineConfig(model="diffusion-gemma-tiny@pre-45828", pipeline_parallel_size=2))
    assert "not run" in src and "int64 [n, CL+1]" in src and src.count("never sent") == 1
    sync = stages_dot(EngineConfig(model="diffusion-gemma-tiny@pre-45828", pipeline_parallel_size=2,
                                   pp_mode="state-sync"))
    assert "never sent" not in sync and "float32 [n, CL, H]" in sync


def test_first_divergence_event_highlights_exactly_its_fields(runs):
    t, ref = runs["pp2-pre-fix-int64"].trace, runs["pp1"].trace
    div = t.first_divergence()
    html = rank_views_html(t, div["event"], reference=ref)
    assert sorted(_highlighted(html)) == sorted(div["fields"])
    assert f'data-diverged="{",".join(div["fields"])}"' in html
    assert diverged_fields(t, div["event"]) == div["fields"]
    # every earlier event highlights nothing
    for i in range(div["event"]):
        earlier = rank_views_html(t, i, reference=ref, css=False)
        assert _highlighted(earlier) == [] and 'data-diverged=""' in earlier


def test_frame_header_names_reads_sent_and_received(runs):
    t = runs["pp2-pre-fix-int64"].trace
    send = next(e for e in t.events if e.phase == "send" and not e.warmup)
    html = rank_views_html(t, send.index)
    tr = send.transfers[0]
    assert f"{tr.name} {tr.dtype} {tr.shape} {tr.bytes:,} B → rank 1" in html
    recv = next(e for e in t.events if e.phase == "recv" and e.index > send.index)
    assert f"{tr.name} {tr.dtype} {tr.shape} {tr.bytes:,} B ← rank 0" in rank_views_html(t, recv.index)
    bc = next(e for e in t.events if e.phase == "broadcast" and not e.warmup)
    assert "sampled_token_ids int64 [1, 9] 72 B → rank 0 (broadcast)" in rank_views_html(t, bc.index)


def test_output_text_so_far_against_pp1(runs):
    t, ref = runs["pp2-pre-fix-int64"].trace, runs["pp1"].trace
    last = rank_views_html(t, len(t.events) - 1, reference=ref)
    assert "four hundred fifty-one" in last and 'data-role="text-differs"' in last
    same = rank_views_html(runs["pp2-state-sync"].trace, len(runs["pp2-state-sync"].trace.events) - 1, reference=ref)
    assert 'data-role="text-same"' in same and same.count("four hundred fifty-one") == 2


def test_warmup_crash_frame_shows_the_error(runs):
    t = runs["pp2-pre-fix"].trace
    crash = next(e for e in t.events if e.data.get("error"))
    html = rank_views_html(t, crash.index)
    assert "AssertionError" in html and "assert sampled_token_ids.dtype == torch.int64" in html
    assert "AssertionError" in event_dot(t, crash.index)
    assert [i for i, _ in key_events(t)][-2:] == [e.index for e in t.events if e.data.get("error")]


def test_event_dot_marks_stale_state_red_and_edges_carry_bytes(runs):
    t = runs["pp2-pre-fix-int64"].trace
    div = t.first_divergence()
    src = event_dot(t, div["event"])
    assert 'rank0 [label="rank 0\\nSTALE: is_encoder_phase (read here), draft_tokens (read here)"' in src
    assert 'color="#D55E00"' in src
    bc = next(e for e in t.events if e.phase == "broadcast" and not e.warmup)
    assert 'rank1 -> rank0 [label="sampled_token_ids int64 [1, 9] 72 B"' in event_dot(t, bc.index)


def test_key_events_fold_look_alike_steps_and_cap(runs):
    t = runs["pp2-pre-fix-int64"].trace
    keys = key_events(t)
    assert 20 <= len(keys) <= 100
    assert t.first_divergence()["event"] in [i for i, _ in keys]
    assert any("folded" in note for _, note in keys)
    assert keys[-1][0] == max(e.index for e in t.events if e.phase == "receive")
    assert len(key_events(t, max_frames=10)) == 10


def test_html_escapes_trace_text():
    t = Trace(meta={"pp_size": 2, "scenario": "<x>", "layers": {"0": [0, 2], "1": [2, 4]}})
    t.events.append(Event(0, 1, 0, "send", '<script>alert("x")</script>', [Transfer(0, 1, "a<b", "float32", [1], 4)],
                          {0: {"r<1>": {"canvas": [2], "draft_tokens": [2], "is_encoder_phase": True,
                                        "self_conditioning_embeds": 0.0, "step": 0, "num_computed_tokens": 0}},
                           1: {}}))
    html = rank_views_html(t, 0)
    assert "<script>" not in html and "&lt;script&gt;" in html and "a&lt;b" in html and "r&lt;1&gt;" in html
    assert '"a<b' not in event_dot(t, 0) or '\\"' not in event_dot(t, 0)
    with pytest.raises(ValueError, match="outside"):
        rank_views_html(t, 5)


def test_tables(runs):
    b = bytes_table_html({"generic-int64": runs["pp2-pre-fix-int64"].trace,
                          "state-sync": runs["pp2-state-sync"].trace})
    row = re.search(r'<tr data-name="self_conditioning_embeds">(.*?)</tr>', b).group(1)
    assert "<td>0</td><td>2,048</td>" in row
    assert sc_bytes(8, 256, 2816) == 23_068_672 and sc_bytes(1, 8, 64) == 2048
    a = accuracy_table_html([{"label": "PP=1", "model": "m", "exact_match": 1.0, "identical_to_pp1": 3, "n": 3},
                             {"label": "x<y", "model": "m", "exact_match": None, "outcome": "warmup-crash",
                              "identical_to_pp1": None, "n": 3}])
    assert "100%" in a and "3/3" in a and "warmup-crash" in a and "x&lt;y" in a


def test_receive_frame_shows_what_reached_rank0_and_the_state_stays_stale(runs):
    t = runs["pp2-pre-fix-int64"].trace
    rec = next(e for e in t.events if e.phase == "receive" and not e.warmup and e.step == 2)
    html = rank_views_html(t, rec.index)
    assert "<b>receives</b> sampled_token_ids int64 [1, 9] 72 B ← rank 1" in html
    assert "num_sampled_num_rejected int32 [2, 1] 8 B ← rank 1" in html
    assert 'data-diverged=""' in html and "is_encoder_phase" in re.search(r'data-stale="([^"]*)"', html).group(1)


def test_stale_fields_are_listed_once_per_rank_however_many_requests_differ(runs):
    import re

    from explainer.render.pp_views import rank_views_html
    trace = runs["pp2-pre-fix"].trace                   # warmup: two _warmup_ requests, both stale on rank 0
    crash = next(e for e in trace.events if e.data.get("error"))
    html = rank_views_html(trace, crash.index)
    (listed,) = re.findall(r"STALE: ([^<]+)</span>", html)
    fields = listed.split(", ")
    assert sorted(fields) == ["draft_tokens", "is_encoder_phase"] and len(fields) == len(set(fields))


def test_frames_carry_badges_not_only_colours(runs):
    t = runs["pp2-pre-fix-int64"].trace
    div = t.first_divergence()
    html = rank_views_html(t, div["event"])
    for field in div["fields"]:
        cell = re.search(rf'<td class="xp-diverged" data-field="{field}" data-changed>(.*?)</td>', html).group(1)
        assert cell.startswith('<span class="xp-badge">≠ READ</span>')
    for cell in re.findall(r'<td class="xp-stale" data-field="[a-z_]+">(.*?)</td>', html):
        assert cell.startswith('<span class="xp-badge">STALE</span>')
    legend = re.search(r'id="xp-pp-event-\d+-legend">(.*?)</div>', html).group(1)
    assert "≠ READ" in legend and "STALE" in legend and " red" not in legend and "amber" not in legend
    assert "≠ diverged" in html


def test_user_frames_hide_warmup_leftovers_and_say_why_canvas_is_not_marked(runs):
    t = runs["pp2-pre-fix-int64"].trace
    first_user = next(e for e in t.events if not e.warmup and e.rank is not None)
    html = rank_views_html(t, first_user.index)
    rows = re.findall(r"<tr><th colspan=\"2\" style=\"text-align:left\">([^<]+)</th></tr>", html)
    assert not any(r.startswith("_warmup_") for r in rows)
    if any(rid.startswith("_warmup_") for v in first_user.views.values() for rid in v):
        assert 'data-role="warmup-left"' in html
    div = t.first_divergence()
    later = rank_views_html(t, div["event"])
    e = t.events[div["event"]]
    if e.views[0]["req-0"]["canvas"] != e.views[t.owner_rank]["req-0"]["canvas"]:
        assert "differs: own copy, not read by this rank" in later


def test_frame_caption_names_the_divergence(runs):
    from explainer.render.pp_frames import frame_caption
    t = runs["pp2-pre-fix-int64"].trace
    div = t.first_divergence()
    cap = frame_caption(t, div["event"])
    assert cap.startswith(f"engine step {div['step']} · rank 0 prepare: ≠ reads ")
    assert all(f in cap for f in div["fields"])
    crash = next(e for e in runs["pp2-pre-fix"].trace.events if e.data.get("error"))
    assert "✗ AssertionError" in frame_caption(runs["pp2-pre-fix"].trace, crash.index)
