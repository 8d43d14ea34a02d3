"""Canvas sampler renderers: golden-ish HTML assertions, frame counts, headless widget wiring.

Records come from hand-built ``StepRecord``s and from ``sampler.generate`` over a deterministic fake
``DiffusionLM`` (tests only; the notebook runs the shipped checkpoint).
"""

import re

import pytest
import torch

from explainer.render import canvas as rc
from explainer.render import canvas_story as rs
from explainer.sampler import StepRecord, StepRecorder, generate, linear_temperature
from explainer.widgets.sampler import canvas_stepper

VOCAB = ["<pad>", "<eos>", "<", "&", "a", "b", " ", "d"]       # V = 8; '<' and '&' must be escaped
PAD, EOS, LT, AMP, A, B, SP, D = range(8)
CFG = dict(canvas_length=4, max_new_tokens=12, max_denoising_steps=4, entropy_bound=0.1, t_min=0.4, t_max=0.8,
           stability_threshold=1, confidence_threshold=0.005, eos_token_id=EOS, pad_token_id=PAD)
PROMPT = torch.tensor([[A, B, D]])


class PeakyLM:
    """Fake DiffusionLM: +20 logits on a fixed target per canvas (row 0); row 1 (if any) is flat."""

    vocab_size = len(VOCAB)

    def __init__(self, targets, flat_rows=()):
        self.targets, self.flat_rows, self.canvases = targets, set(flat_rows), -1

    def encode(self, input_ids):
        self.canvases += 1

    def decode(self, canvas, sc):
        logits = torch.zeros(*canvas.shape, self.vocab_size)
        target = torch.tensor(self.targets[self.canvases])
        for row in range(canvas.shape[0]):
            if row not in self.flat_rows:
                logits[row, torch.arange(canvas.shape[1]), target] = 20.0
        return logits


def run(targets, batch=1, flat_rows=(), **overrides):
    rec = StepRecorder()
    cfg = {**CFG, **overrides}
    prompt = PROMPT.expand(batch, -1)
    seqs = generate(PeakyLM(targets, flat_rows), prompt, generator=torch.Generator().manual_seed(0), recorder=rec,
                    **cfg)
    return rec, cfg, seqs


TARGETS = [[LT, AMP, A, SP], [B, EOS, D, D], [A, A, A, A]]   # canvas 2 holds EOS -> 2 canvases


def known_record(canvas_index=1, cur_step=3, finished=False, stable=False, confident=True):
    return StepRecord(
        canvas_index=canvas_index, cur_step=cur_step, temperature=linear_temperature(cur_step, 4),
        input_canvas=torch.tensor([[D, D, D, D]]), candidate=torch.tensor([[LT, A, B, AMP]]),
        accepted=torch.tensor([[True, False, True, False]]),
        entropy=torch.tensor([[0.001, 2.0, 0.002, 1.5]]), argmax=torch.tensor([[LT, A, B, EOS]]),
        canvas=torch.tensor([[LT, D, B, SP]]), stable=torch.tensor([stable]), confident=torch.tensor([confident]),
        finished=torch.tensor([finished]))


def cells(html, row_class):
    """(classes, text) of every cell in the grid row with class ``row_class``."""
    row = re.search(rf'<tr class="{row_class}"[^>]*>(.*?)</tr>', html).group(1)
    return [(c.split(), t) for c, t in
            re.findall(r'<span class="xp-cell ([^"]*)"[^>]*>([^<]*)(?:<sup>[^<]*</sup>)?</span>', row)]


def render_known(**kw):
    glyphs = rc.Glyphs(VOCAB, PAD, EOS)
    return rc.render_step(known_record(**kw.pop("record", {})), step_number=2, prompt=[A, B, D],
                          committed=[[LT, AMP, A, SP]], glyphs=glyphs, config=CFG, **kw)


def test_accepted_and_renoised_cells_for_a_known_record():
    html = render_known()
    nxt = cells(html, "xp-row-next")
    assert [("xp-accepted" in c, "xp-renoised" in c) for c, _ in nxt] == [(True, False), (False, True),
                                                                          (True, False), (False, True)]
    assert [t for _, t in nxt] == ["&lt;", "d", "b", "␣"]
    assert [t for _, t in cells(html, "xp-row-input")] == ["d"] * 4
    assert [t for _, t in cells(html, "xp-row-candidate")] == ["&lt;", "a", "b", "&amp;"]
    # not the last step: the argmax is a staged draft, nothing committed
    assert all("xp-draft" in c for c, _ in cells(html, "xp-row-argmax"))
    assert "xp-committed" not in html.split("</style>")[1].split('id="xp-c2-s2-legend"')[0]


def test_last_step_commits_the_argmax():
    html = render_known(last=True, record=dict(finished=True, stable=True))
    arg = cells(html, "xp-row-argmax")
    assert all("xp-committed" in c for c, _ in arg)
    assert [t for _, t in arg] == ["&lt;", "a", "b", "⏎"]
    assert "stable and confident → stop" in html


def test_frame_header_ids_prefix_temperature_and_stop_numbers():
    html = render_known()
    for suffix in ("", "-head", "-prefix", "-canvas", "-stop", "-legend", "-temperature"):
        assert f'id="xp-c2-s2{suffix}"' in html
    assert 'data-canvas="2" data-step="2"' in html
    assert "T = 0.7000" in html and "cur_step 3 of 4" in html
    stop = re.search(r'id="xp-c2-s2-stop"[^>]*>(.*?)</div>', html).group(1)
    assert "accepted 2 of 4" in stop and "entropy bound 0.1" in stop
    assert "mean entropy 0.8758 ≥ 0.005" in stop
    assert 'stable <span class="xp-no">✗ no</span>' in stop and 'confident <span class="xp-yes">✓ yes</span>' in stop
    prefix = re.search(r'id="xp-c2-s2-prefix">(.*?)</div>', html).group(1)
    assert "3 prompt tokens + 1 canvas" in prefix
    assert prefix.count("xp-block") == 2 and prefix.count("xp-prefix") == 7


def test_legend_in_every_frame_and_tokens_escaped():
    rec, cfg, _ = run(TARGETS)
    frames = rs.canvas_frames(rec, PROMPT, vocab=VOCAB, config=cfg)
    for f in frames:
        assert 'class="xp-legend"' in f and "<style>" in f
        assert "✓ solid outline = accepted" in f and "↻ dashed outline = renoised" in f
        key = re.search(r'<div class="xp-legend"[^>]*>(.*?)</div>', f).group(1)
        assert "<br" not in key and len(re.sub(r"<[^>]+>", "", key)) < 240      # one line, not a paragraph
        text = re.sub(r"<[^>]+>", "", f.split("</style>", 1)[1])   # tags removed: no raw '<' may remain
        assert "<" not in text and "&lt;" in f


def test_vocabulary_markup_never_leaks():
    glyphs = rc.Glyphs(["<b>x</b>", "<script>"], None, None)
    html = rc.render_step(StepRecord(0, 1, 1.0, *(torch.tensor([[0, 1]]),) * 2, torch.tensor([[True, False]]),
                                     torch.zeros(1, 2), *(torch.tensor([[0, 1]]),) * 2, None, None,
                                     torch.tensor([False])), step_number=1, prompt=[1], glyphs=glyphs)
    assert "<b>x</b>" not in html and "<script>" not in html and "&lt;script&gt;" in html
    assert "adaptive stopping off" in html


def test_frames_count_equals_steps_plus_commits():
    rec, cfg, seqs = run(TARGETS)
    assert [c.steps for c in rec.canvases] == [2, 2]          # peaky logits: accept all, then stable
    frames = rs.canvas_frames(rec, PROMPT, vocab=VOCAB, config=cfg)
    assert len(frames) == len(rec.steps) + len(rec.canvases) == 6
    assert len(rs.canvas_frames(rec, PROMPT, vocab=VOCAB, config=cfg, commit_frames=False)) == len(rec.steps)
    kinds = [re.search(r'id="(xp-c\d+-(?:s\d+|commit))"', f).group(1) for f in frames]
    assert kinds == ["xp-c1-s1", "xp-c1-s2", "xp-c1-commit", "xp-c2-s1", "xp-c2-s2", "xp-c2-commit"]
    # canvas 2 sees canvas 1 committed in its prefix; the commit frame pads after EOS
    assert "3 prompt tokens + 1 canvas" in frames[3]
    assert [t for _, t in cells(frames[5], "xp-row-appended")] == ["b", "⏎", "·", "·"]
    assert "this row is finished" in frames[5]
    assert "encoded causally into the KV cache next" in frames[2]
    assert seqs[0, 3:].tolist() == [LT, AMP, A, SP, B, EOS, PAD, PAD]


def test_step_budget_and_frozen_rows():
    rec, cfg, _ = run(TARGETS[2:], batch=2, flat_rows=[1], max_new_tokens=4)
    assert len(rec.steps) == 4                                # row 1 never confident: budget of 4
    row0 = rs.canvas_frames(rec, PROMPT.expand(2, -1), vocab=VOCAB, config=cfg, row=0)
    row1 = rs.canvas_frames(rec, PROMPT.expand(2, -1), vocab=VOCAB, config=cfg, row=1)
    assert "stable and confident → stop" in row0[1]
    assert "row already finished: frozen" in row0[2] and "row already finished: frozen" in row0[3]
    assert "xp-accepted" not in row0[2].split('class="xp-row-next"')[1].split("</tr>")[0]
    assert "step budget used up" in row1[3]
    summary = rs.render_summary(rec, vocab=VOCAB, config=cfg, row=1)
    assert "step budget (4) used up" in summary
    assert re.search(r'<tr id="xp-summary-c1"><td>1</td><td>4</td><td>steps 1–4: 1/4 each</td>', summary)


def test_summary_table():
    rec, cfg, _ = run(TARGETS)
    html = rs.render_summary(rec, vocab=VOCAB, config=cfg)
    assert html.count('<tr id="xp-summary-c') == 2
    assert re.search(r'<tr id="xp-summary-c1"><td>1</td><td>2</td><td>step 1: 4/4 · step 2: 4/4</td>'
                     r'<td>stable and confident</td>', html)
    assert "4 decoder forwards for 8 tokens (2.00 tokens per forward)" in html
    assert 'id="xp-summary-legend"' in html


def test_temperature_table_one_row_per_cur_step():
    rec, cfg, _ = run(TARGETS)
    html = rs.render_temperatures(rec, config=cfg)
    rows = re.findall(r"<tr><td>(\d+)</td><td>(\d+)</td><td>([\d.]+)</td><td>([\d.]+)</td><td>([^<]*)</td></tr>", html)
    # two canvases of 2 steps each: cur_step 4 and 3, each used by both canvases (not four look-alike rows)
    assert [(r[0], r[1], r[4]) for r in rows] == [("4", "1", "all 2 canvases"), ("3", "2", "all 2 canvases")]
    assert all(r[2] == r[3] for r in rows) and rows[0][2] == "0.8000" and rows[1][2] == "0.7000"
    assert "0.5000" in html                                   # last possible value at cur_step 1 of 4


def test_stepper_wiring_headless():
    rec, cfg, _ = run(TARGETS)
    stepper = canvas_stepper(rec, PROMPT, vocab=VOCAB, config=cfg)
    assert stepper.slider.max == 5 and len(stepper.stack.children) == 6
    assert 'data-canvas="1" data-step="1"' in stepper.current
    stepper.slider.value = 3
    assert stepper.stack.selected_index == 3
    assert 'data-canvas="2" data-step="1"' in stepper.current
    stepper.slider.value = 5
    assert 'id="xp-c2-commit"' in stepper.current
    assert stepper.step(-1) == stepper.frames[4] and 'data-canvas="2" data-step="2"' in stepper.current


@pytest.mark.parametrize("token,shown", [(SP, "␣"), (PAD, "·"), (EOS, "⏎"), (A, "a"), (99, "99")])
def test_glyphs(token, shown):
    assert rc.Glyphs(VOCAB, PAD, [EOS, 7 + 100])(token) == shown
    assert rc.Glyphs(None)(A) == str(A)


def test_hf_tiny_builds_the_same_tiny_model_every_time():
    pytest.importorskip("transformers")
    from explainer.model.hf_tiny import tiny_hf_model

    model = tiny_hf_model(seed=0)
    assert sum(p.numel() for p in model.parameters()) == 359_284          # the config of explainer.model.hf_tiny
    assert model.config.canvas_length == 8 and model.config.text_config.vocab_size == 128
    again = tiny_hf_model(seed=0)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))


def test_accepted_counts_name_their_steps():
    assert rs.accepted_runs([8, 7, 8, 8, 8], 8) == "step 1: 8/8 · step 2: 7/8 · steps 3–5: 8/8 each"
    assert rs.accepted_runs([4, 4]) == "step 1: 4 · step 2: 4" and rs.accepted_runs([]) == ""


def test_every_cell_state_carries_a_badge_and_the_legend_names_badges_not_colours():
    html = render_known(last=True, record=dict(finished=True, stable=True))
    nxt = re.search(r'<tr class="xp-row-next"[^>]*>(.*?)</tr>', html).group(1)
    assert nxt.count("<sup>✓</sup>") == 2 and nxt.count("<sup>↻</sup>") == 2
    assert re.search(r'<tr class="xp-row-argmax">(.*?)</tr>', html).group(1).count("<sup>⇓</sup>") == 4
    legend = re.search(r'id="xp-c2-s2-legend">(.*?)</div>', html).group(1)
    assert "✓ solid outline = accepted" in legend and "↻ dashed outline = renoised" in legend
    for colour in ("green", "orange", "red", "blue"):
        assert colour not in legend


def _unsure_run():
    """A flat-ish fake model: several positions over the bound, so the accept rule renoises some."""
    class Unsure(PeakyLM):
        def decode(self, canvas, sc):
            logits = super().decode(canvas, sc)
            logits[0, 1:, :] = torch.linspace(0, 3, self.vocab_size)       # positions 1.. are unsure
            return logits
    rec = StepRecorder()
    generate(Unsure(TARGETS), PROMPT, generator=torch.Generator().manual_seed(0), recorder=rec,
             **{**CFG, "max_new_tokens": 4})
    return rec


def test_accept_rule_arithmetic_matches_the_samplers_verdict():
    rec = _unsure_run()
    frames, captions, marks = rs.canvas_story(rec, PROMPT, vocab=VOCAB, config=CFG)
    assert "first renoise" in marks and "commit 1" in marks
    for k, rec_step in enumerate(rec.steps):
        rule = re.search(r'id="xp-c1-s%d-accept">(.*?)</table></div>' % (k + 1), frames[k]).group(1)
        cells = re.findall(r'data-pos="(\d)" data-accepted="(\d)">pos \d<br>h ([\d.e-]+)<br>Σ ([\d.e-]+) (≤|&gt;) 0.1<br>'
                           r'<b class="xp-(acc|ren)">(✓|↻)</b>', rule)
        assert len(cells) == 4
        for pos, acc, h, before, cmp, cls, badge in cells:
            # the arithmetic shown decides the verdict shown, and the verdict is the sampler's own
            assert (cmp == "≤") == (acc == "1") == (badge == "✓") == bool(rec_step.accepted[0, int(pos)])
        assert [float(c[3]) for c in cells] == sorted(float(c[3]) for c in cells)     # running sums ascend
    assert any("↻ renoised" in c and not c.startswith("canvas 1, step 1 (from random tokens): 4 ✓") for c in captions)


def test_stop_rule_shows_the_comparison_and_the_mean():
    rec, cfg, _ = run(TARGETS)
    frames = rs.canvas_frames(rec, PROMPT, vocab=VOCAB, config=cfg)
    first = re.search(r'id="xp-c1-s1-rule">(.*?)</div>', frames[0]).group(1)
    assert "no earlier draft to compare with yet" in first and "stable <span class=\"xp-no\">✗ no</span>" in first
    second = re.search(r'id="xp-c1-s2-rule">(.*?)</div>', frames[1]).group(1)
    assert "4 of 4 positions equal" in second and "stable <span class=\"xp-yes\">✓ yes</span>" in second
    assert re.search(r"mean entropy = [\d.]+ / 4 = [\d.]+ &lt; 0.005", second)


def test_stepper_captions_bookmarks_and_what_each_frame_changed():
    rec, cfg, _ = run(TARGETS)
    st = canvas_stepper(rec, PROMPT, vocab=VOCAB, config=cfg)
    # what a jump must bring into view: a step's next canvas and stop verdict, a commit's appended tokens
    assert re.findall(r'<(?:tr|div) class="([^"]+)"[^>]*\bdata-changed', st.frames[0]) == ["xp-row-next", "xp-stop"]
    assert re.findall(r'<(?:tr|div) class="([^"]+)"[^>]*\bdata-changed', st.frames[2]) == ["xp-row-appended"]
    assert st.caption.startswith("frame 1 of 6 · canvas 1, step 1 (from random tokens): 4 ✓ accepted, 0 ↻ renoised; not stable")
    assert st.bookmarks == {"commit 1": 2, "commit 2": 5}
    assert 'id="xp-c2-commit"' in st.jump_to("commit 2") and st.slider.value == 5
    assert "frame 6 of 6 · canvas 2 committed after 2 steps" in st.caption


def test_accept_rule_shows_enough_decimals_to_read_a_small_bound():
    # at bound 0.001, two decimals would print "Σ 0.00 > 0.001" for a sum of 0.0014: the rule would look false
    import torch

    from explainer.render.rules import accept_rule_html
    entropy = torch.tensor([0.0004, 0.0010, 0.0030])
    accepted = torch.tensor([True, True, False])        # Σ before: 0, 0.0004, 0.0014
    html = accept_rule_html(entropy, accepted, 0.001, "t")
    assert "Σ 0.00040 ≤ 0.001" in html and "Σ 0.00140 &gt; 0.001" in html


def test_tiny_entropies_keep_their_order_readable():
    """A sure model's entropies are all far below 0.01: printed with 2 or 3 decimals they would all read 0.00 and
    the accept rule's sort order would look random. They keep two significant digits (one under a bar)."""
    import torch

    from explainer.render.rules import accept_rule_html, entropy_text

    assert [entropy_text(h, 3) for h in (1.26e-6, 1.96e-7, 0.0, 0.0214)] == ["1.3e-06", "2.0e-07", "0.000", "0.021"]
    assert [entropy_text(h, 2, compact=True) for h in (7.7e-7, 0.0012, 0.4)] == ["8e-7", "1e-3", "0.40"]
    h = torch.tensor([1.25e-6, 1.01e-6, 1.44e-6, 1.96e-7])
    rule = accept_rule_html(h, torch.ones(4, dtype=torch.bool), 0.1, "f")
    shown = [float(x) for x in re.findall(r"<br>h ([\d.e-]+)<br>", rule)]
    assert shown == sorted(shown) and len(set(shown)) == 4          # lowest first, and visibly so
