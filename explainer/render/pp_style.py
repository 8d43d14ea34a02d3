"""How the PP pictures look: the shared stylesheet, the token glyphs, and how each synced state field is drawn."""

from __future__ import annotations

from explainer.model import task
from explainer.render.canvas import Glyphs
from explainer.vocab import VIEW_FIELDS

# How each field of vocab.STATE_SYNC_FIELDS (what a non-last rank reads but only the last rank's sampler advances)
# is drawn: its shape, for a plan that was not run, and the stage node that reads it. The pictures list the
# fields in FIELD_SHAPE's order (a test checks both tables name exactly the synced fields).
FIELD_SHAPE = {"is_encoder_phase": "bool [n]", "self_conditioning_embeds": "float32 [n, CL, H]",
               "draft_tokens": "int64 [n, CL]"}
READER = {"draft_tokens": "embed", "self_conditioning_embeds": "sc", "is_encoder_phase": "layers"}
STATE_FIELDS = tuple(FIELD_SHAPE)
VIEW_ROWS = VIEW_FIELDS                       # a rank's view of a request, row by row
GLYPHS = Glyphs(task.VOCAB, task.PAD_ID, task.EOS_ID)

CSS = """<style>
.xp-pp{font:13px/1.35 system-ui,sans-serif;color:#222;max-width:900px}
.xp-pp .xp-head{font-weight:600;margin:2px 0 4px}
.xp-pp .xp-io{margin:2px 0;color:#333}.xp-pp .xp-io b{color:#555;font-weight:600}
.xp-pp .xp-cols{display:flex;flex-wrap:wrap;gap:10px;align-items:flex-start;margin:4px 0}
.xp-pp .xp-rank{border:1px solid #bbb;border-radius:4px;padding:4px 6px;background:#fff}
.xp-pp .xp-rank.xp-acting{border:3px solid #0072B2}
.xp-pp .xp-rank h4{margin:0 0 3px;font-size:13px}
.xp-pp table.xp-view{border-collapse:collapse}
.xp-pp table.xp-view th{text-align:right;font-weight:400;color:#555;padding:1px 6px 1px 0;white-space:nowrap}
.xp-pp table.xp-view td{padding:1px 4px;border-radius:3px;white-space:nowrap}
.xp-pp table.xp-view td.xp-aside{white-space:normal;min-width:14em;max-width:22em}
.xp-pp .xp-diverged{background:#fbe3d2;outline:3px solid #D55E00;color:#7a3600;font-weight:600}
.xp-pp .xp-stale{background:#fdf0d0;outline:2px dashed #E69F00}
.xp-pp .xp-badge{font:700 10px/1 system-ui,sans-serif;padding:1px 3px;border-radius:2px;margin-right:3px;
 background:#fff;border:1px solid currentColor;white-space:nowrap}
.xp-pp .xp-aside{font-size:11px;color:#666;font-style:italic;white-space:normal}
.xp-pp span.xp-aside{display:block;max-width:16em}
.xp-pp .xp-tok{display:inline-block;min-width:1.1em;text-align:center;font:13px/1.2 ui-monospace,monospace;
 border:1px solid #ccc;border-radius:2px;margin:0 1px;background:#fafafa}
.xp-pp .xp-flow{display:flex;align-items:center;gap:6px;margin:6px 0;font-size:12px}
.xp-pp .xp-node{border:1px solid #999;border-radius:4px;padding:3px 6px;background:#f5f5f5;min-width:9em}
.xp-pp .xp-node.xp-acting{border:3px solid #0072B2;background:#e1eef8}
.xp-pp .xp-arrow{flex:1;text-align:center;color:#0072B2;border-bottom:2px solid #0072B2;padding:0 4px 2px}
.xp-pp .xp-arrow.xp-none{color:#888;border-bottom:1px dotted #bbb}
.xp-pp .xp-arrow.xp-err,.xp-pp .xp-red{color:#B54D00;border-color:#D55E00}
.xp-pp .xp-text{font:13px ui-monospace,monospace;background:#f8f8f8;padding:1px 4px}
.xp-pp .xp-text .xp-bad{background:#fbe3d2;color:#7a3600;text-decoration:underline wavy #D55E00}
.xp-pp .xp-legend{font-size:12px;color:#555;margin-top:6px}
.xp-pp table.xp-tbl{border-collapse:collapse;margin:4px 0}
.xp-pp table.xp-tbl td,.xp-pp table.xp-tbl th{border:1px solid #ddd;padding:2px 8px;text-align:right}
.xp-pp table.xp-tbl td:first-child,.xp-pp table.xp-tbl th:first-child{text-align:left}
</style>"""
