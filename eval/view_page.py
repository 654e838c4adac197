"""The page of ``r2a bench view`` (:mod:`eval.view`): one HTML file with its CSS and vanilla JS inlined, its data a
JSON block, nothing fetched — it opens from disk (``file://``) in any browser.

The script builds the filter from the data and draws the matching pairs, :data:`PAGE_SIZE` at a time; each pair is
an ``<article class="pair">`` carrying ``data-task``, ``data-factor``, ``data-level``, ``data-episode``,
``data-outcome`` (``SF``, ``FS``, ``FF``, ``SS``: baseline → candidate), ``data-baseline`` and ``data-candidate``.
"""

from __future__ import annotations

import html
import json
from typing import Any

#: pairs drawn at first and added by each "show more"
PAGE_SIZE = 50

_PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="generator" content="__FORMAT__">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 0 auto; max-width: 1400px; padding: 0 16px 40px; color: #222; }
h1 { font-size: 20px; margin: 16px 0 4px; } h2 { font-size: 17px; margin: 20px 0 6px; }
.muted, figcaption, .note { color: #666; } code { font-size: 12px; }
table { border-collapse: collapse; font-size: 12px; margin: 6px 0; }
th, td { border: 1px solid #ddd; padding: 2px 6px; text-align: left; } th { background: #f3f3f3; }
details > summary { cursor: pointer; }
#filter { position: sticky; top: 0; background: #fff; border-bottom: 1px solid #ccc; padding: 8px 0; z-index: 1; }
#filter label { margin-right: 12px; white-space: nowrap; } #filter select { margin-left: 4px; }
.pair { border: 1px solid #ccc; border-radius: 6px; margin: 12px 0; padding: 8px 10px; }
.pair > header { font-size: 15px; margin-bottom: 4px; }
.badge { border-radius: 4px; color: #fff; font-size: 12px; padding: 1px 6px; margin-left: 6px; }
.SF { background: #c0392b; } .FS { background: #27ae60; } .FF { background: #7f8c8d; } .SS { background: #2980b9; }
.sides { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
.side { border-top: 4px solid #bbb; padding-top: 4px; min-width: 0; } .side.ok { border-color: #27ae60; }
.side.fail { border-color: #c0392b; } .side h3 { font-size: 14px; margin: 2px 0 6px; }
.frames img { max-width: 100%; image-rendering: pixelated; display: block; } figure { margin: 0 0 6px; }
.bar { position: relative; height: 10px; background: #eee; border-radius: 3px; margin: 4px 0; }
.fill { position: absolute; left: 0; top: 0; bottom: 0; border-radius: 3px; background: #c0392b; }
.ok .fill { background: #27ae60; } .tick { position: absolute; top: -2px; bottom: -2px; width: 1px; background: #333; }
.stages { list-style: none; padding: 0; margin: 4px 0; display: flex; flex-wrap: wrap; gap: 4px; }
.stages li { border: 1px solid #aaa; border-radius: 10px; padding: 0 8px; font-size: 12px; color: #888; }
.stages li.reached { background: #e8f6ee; border-color: #27ae60; color: #1e7e48; }
.stages li.stopped { border: 2px solid #c0392b; color: #c0392b; }
.gate { display: flex; gap: 3px; align-items: flex-end; height: 44px; margin: 4px 0 14px; }
.gate div { width: 30px; background: #8e44ad; position: relative; min-height: 1px; }
.gate span { position: absolute; top: 100%; left: 0; right: 0; text-align: center; font-size: 10px; color: #555; }
.trace td:first-child { color: #666; }
#more { margin: 10px 0; padding: 4px 16px; }
</style>
</head>
<body>
<h1>__TITLE__</h1>
<p id="about" class="muted"></p>
<section id="tables">
__HEADLINE__
<details><summary>Uplift per factor and level</summary>
__UPLIFT__
</details>
</section>
<h2>Paired episodes</h2>
<form id="filter" onsubmit="return false">
<label>pair<select id="f-pair"></select></label>
<label>task<select id="f-task"></select></label>
<label>factor<select id="f-factor"></select></label>
<label>level<select id="f-level"></select></label>
<span id="f-outcome"></span>
<div id="count" class="muted"></div>
</form>
<div id="pairs"></div>
<button id="more" type="button">show more</button>
<script type="application/json" id="view-data">__DATA__</script>
<script>
"use strict";
const DATA = JSON.parse(document.getElementById("view-data").textContent);
const OUTCOME_LABEL = {"S->F": "S→F (candidate broke it)", "F->S": "F→S (candidate fixed it)",
                       "F->F": "both failed", "S->S": "both succeeded"};
const code = (outcome) => outcome.replace("->", "");
const PAGE = __PAGE_SIZE__;
const SHOWN_R2A = ["queries", "fallbacks", "fallback_share", "mean_seed_distance", "recovery_steps", "mean_gate",
                   "trace"];
let limit = PAGE;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k.startsWith("data-") || k === "class" || k === "title" || k === "style") node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const child of children.flat()) if (child !== null && child !== undefined && child !== false)
    node.append(child instanceof Node ? child : String(child));
  return node;
}
const num = (x, d = 3) => (x === null || x === undefined) ? "–" : Number(x).toFixed(d);
const pct = (x) => (x === null || x === undefined) ? "–" : `${Math.round(100 * x)} %`;
const unique = (values) => [...new Set(values)];

function fillSelect(id, values, label) {
  const select = document.getElementById(id);
  select.append(el("option", {value: ""}, "all"));
  for (const v of values) select.append(el("option", {value: String(v)}, label ? label(v) : String(v)));
  select.addEventListener("change", () => { limit = PAGE; draw(); });
}

function setUp() {
  const p = DATA.pairs;
  const frames = DATA.frames_saved ? `frames of ${DATA.frames_copied} episode(s) copied (--frames ${DATA.frames})`
    : "this run saved no frames (r2a bench run --save-frames failures saves them): timelines and traces only";
  document.getElementById("about").textContent = `${DATA.run}${DATA.config_name ? " (config " + DATA.config_name
    + ")" : ""}: ${p.length} paired episodes of ${DATA.policies.join(", ")}; ${frames}.`;
  fillSelect("f-pair", unique(p.map((x) => x.baseline + " → " + x.candidate)));
  fillSelect("f-task", unique(p.map((x) => x.task)));
  fillSelect("f-factor", unique(p.map((x) => x.factor)));
  fillSelect("f-level", unique(p.map((x) => x.level)).sort((x, y) => x - y), (v) => "L" + v);
  const box = document.getElementById("f-outcome");
  for (const o of DATA.outcomes) {
    const input = el("input", {type: "checkbox", id: "o-" + code(o), value: o,
                               checked: DATA.initial_outcomes.includes(o)});
    input.addEventListener("change", () => { limit = PAGE; draw(); });
    box.append(el("label", {}, input, " ", el("span", {class: "badge " + code(o)}, OUTCOME_LABEL[o]),
                  " ", el("span", {id: "n-" + code(o), class: "muted"})));
  }
  document.getElementById("more").addEventListener("click", () => { limit += PAGE; draw(); });
}

function selected() {
  const value = (id) => document.getElementById(id).value;
  return {pair: value("f-pair"), task: value("f-task"), factor: value("f-factor"), level: value("f-level"),
          outcomes: DATA.outcomes.filter((o) => document.getElementById("o-" + code(o)).checked)};
}

function draw() {
  const f = selected();
  const other = DATA.pairs.filter((p) => (!f.pair || p.baseline + " → " + p.candidate === f.pair)
    && (!f.task || p.task === f.task) && (!f.factor || p.factor === f.factor)
    && (!f.level || String(p.level) === f.level));
  for (const o of DATA.outcomes)
    document.getElementById("n-" + code(o)).textContent = `(${other.filter((p) => p.outcome === o).length})`;
  const hits = other.filter((p) => f.outcomes.includes(p.outcome));
  const shown = hits.slice(0, limit);
  document.getElementById("count").textContent = `${hits.length} of ${DATA.pairs.length} pairs match`
    + (hits.length > shown.length ? `; showing the first ${shown.length}` : "");
  document.getElementById("pairs").replaceChildren(...shown.map(card));
  document.getElementById("more").hidden = hits.length <= shown.length;
}

function card(p) {
  const instruction = p.a.instruction === p.b.instruction ? p.a.instruction : null;
  return el("article", {class: "pair", "data-task": p.task, "data-factor": p.factor, "data-level": p.level,
                        "data-episode": p.episode, "data-outcome": code(p.outcome), "data-baseline": p.baseline,
                        "data-candidate": p.candidate},
    el("header", {}, el("b", {}, p.task), ` · ${p.factor}${p.factor === "clean" ? "" : " L" + p.level}`,
       ` · episode ${p.episode}`, el("span", {class: "badge " + code(p.outcome)}, OUTCOME_LABEL[p.outcome]),
       el("span", {class: "muted"}, `  ${p.baseline} → ${p.candidate}`),
       instruction ? el("div", {class: "muted"}, `“${instruction}”`) : null),
    p.shift_params ? el("details", {}, el("summary", {class: "muted"}, "shift parameters"),
                        el("pre", {}, JSON.stringify(p.shift_params, null, 1))) : null,
    el("div", {class: "sides"}, side(p.a, instruction), side(p.b, instruction)));
}

function side(s, shared) {
  const verdict = s.success ? "success" : "failure";
  return el("section", {class: "side " + (s.success ? "ok" : "fail"), "data-policy": s.policy,
                        "data-success": String(s.success)},
    el("h3", {}, `${s.policy}: ${verdict} after ${s.steps} of ${s.horizon} steps`),
    shared === null && s.instruction ? el("div", {class: "muted"}, `“${s.instruction}”`) : null,
    s.frames ? el("figure", {class: "frames"}, el("img", {src: s.frames, alt: `frames of ${s.policy}`,
                                                           loading: "lazy"}),
                  el("figcaption", {}, "agentview at steps " + (s.frame_steps || []).join(", ")))
             : s.frames_note ? el("p", {class: "note"}, s.frames_note) : null,
    timeline(s), trace(s));
}

function timeline(s) {
  const horizon = s.horizon || s.steps || 1;
  const bar = el("div", {class: "bar", title: `${s.steps} of ${horizon} control steps`},
                 el("div", {class: "fill", style: `width:${Math.min(100, 100 * s.steps / horizon)}%`}));
  for (const step of s.frames ? s.frame_steps || [] : [])  // where the frames shown were taken
    bar.append(el("div", {class: "tick", style: `left:${100 * step / horizon}%`}));
  const stages = el("ol", {class: "stages"});
  for (const name of s.stage_names || []) {
    const reached = (s.stages || {})[name];
    stages.append(el("li", {class: reached ? "reached" : (name === s.first_incomplete_stage ? "stopped" : ""),
                            title: reached ? "reached" : "not reached"}, (reached ? "✓ " : "✗ ") + name));
  }
  const events = Object.entries(s.events || {}).map(([k, n]) => `${k.replaceAll("_", " ")} ×${n}`);
  return el("div", {class: "timeline"}, bar, stages,
            events.length ? el("div", {class: "note"}, "events: " + events.join(", ")) : null);
}

function trace(s) {
  if (!s.r2a && !s.harmonize) return el("p", {class: "note"}, "no wrapper diagnostics (the policy alone)");
  const rows = [];
  const r = s.r2a;
  if (r) {
    const reasons = Object.entries(r.fallbacks || {}).map(([k, n]) => `${k} ${n}`).join(", ");
    rows.push(["R2A queries", r.queries],
              ["fell back", `${pct(r.fallback_share)}${reasons ? " (" + reasons + ")" : ""}`],
              ["mean seed distance", num(r.mean_seed_distance)],
              ["start-pose recovery", `${r.recovery_steps || 0} steps`]);
    for (const [k, v] of Object.entries(r)) if (!SHOWN_R2A.includes(k))  // what other wrapper variants summarize
      rows.push([k.replaceAll("_", " "), JSON.stringify(v, (_, x) => typeof x === "number" ? +x.toFixed(3) : x)]);
  }
  const h = s.harmonize;
  if (h) {
    const cams = Object.entries(h.active_share || {}).map(([c, v]) => `${c} ${pct(v)}`).join(", ");
    rows.push(["harmonized", `${pct(h.any_active_share)} of ${h.queries} queries${cams ? " (" + cams + ")" : ""}`]);
  }
  const table = el("table", {class: "trace"}, rows.map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", {}, v))));
  const gate = r && r.mean_gate ? el("div", {class: "gate", title: "mean gate S per action dimension"},
    r.mean_gate.map((g, i) => el("div", {style: `height:${Math.max(0, Math.min(1, g)) * 100}%`,
                                         title: `${DATA.gate_names[i] || i}: S = ${num(g)}`},
                                 el("span", {}, DATA.gate_names[i] || i)))) : null;
  const series = queryTrace(s);
  return el("div", {}, table, gate ? el("div", {class: "note"}, "mean gate S per dimension (0 base … 1 reference)")
            : null, gate, series || el("div", {class: "note"}, "per-episode means: these records (schema v1) hold no "
                                              + "per-query trace"));
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) node.setAttribute(k, v);
  for (const child of children.flat()) if (child) node.append(child);
  return node;
}
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;

// R2A's per-query trace over the episode's control steps (records of schema v2): the gate S on translation (mean of
// x, y, z) and rotation, a grey mark where the query fell back to the base (the reason on hover), the seed distance
// (dashed, its own scale), blue ticks where harmonization was on, the start-pose recovery span shaded.
function queryTrace(s) {
  const t = s.r2a && s.r2a.trace, h = s.harmonize && s.harmonize.trace;
  if (!t && !h) return null;
  const W = 460, H = 120, L = 30, B = 16, top = 6, horizon = Math.max(s.horizon || s.steps || 1, 1);
  // the S axis reaches the largest S of the episode, rounded up to a quarter (at least .5, at most 1)
  const sValues = t ? t.gate.filter(Boolean).flat() : [];
  const sTop = Math.min(1, Math.max(0.5, Math.ceil(Math.max(0, ...sValues) * 4) / 4));
  const x = (step) => L + (W - L - 4) * step / horizon;
  const y = (v) => top + (H - B - top) * (1 - Math.min(v, sTop) / sTop);
  const parts = [svg("line", {x1: L, y1: y(0), x2: W - 4, y2: y(0), stroke: "#bbb"}),
                 svg("text", {x: 2, y: y(sTop) + 8, "font-size": 9, fill: "#666"}, `S ${sTop}`),
                 svg("text", {x: 2, y: y(0), "font-size": 9, fill: "#666"}, "0"),
                 svg("text", {x: W - 4, y: H - 3, "font-size": 9, fill: "#666", "text-anchor": "end"},
                     `step ${horizon}`)];
  if (t && t.recovery) {
    const [first, last] = t.recovery;
    parts.push(svg("rect", {x: x(first), y: top, height: H - B - top, fill: "#fdebd0",
                            width: Math.max(2, x(last + 1) - x(first))},
                   svg("title", {}, `start-pose recovery, steps ${first}–${last}`)));
  }
  if (t) {
    const line = (pick, color, name) => {
      const pts = t.step.map((st, i) => t.gate[i] ? `${x(st)},${y(pick(t.gate[i]))}` : null).filter(Boolean);
      return pts.length ? svg("polyline", {points: pts.join(" "), fill: "none", stroke: color, "stroke-width": 1.5},
                               svg("title", {}, name)) : null;
    };
    parts.push(line((g) => mean(g.slice(0, 3)), "#8e44ad", "gate S, translation (mean of x, y, z)"),
               line((g) => mean(g.slice(3, 6)), "#e67e22", "gate S, rotation (mean of rx, ry, rz)"));
    const seeds = t.seed_distance.filter((d) => d !== null), top_d = seeds.length ? Math.max(...seeds, 1e-6) : 1;
    const dpts = t.step.map((st, i) => t.seed_distance[i] === null ? null
                            : `${x(st)},${top + (H - B - top) * (1 - t.seed_distance[i] / top_d)}`).filter(Boolean);
    if (dpts.length) parts.push(svg("polyline", {points: dpts.join(" "), fill: "none", stroke: "#7f8c8d",
                                                 "stroke-dasharray": "3 2"},
                                    svg("title", {}, `seed distance (dashed; top of the plot = ${num(top_d)})`)));
    t.step.forEach((st, i) => { if (t.fallback[i]) parts.push(svg("circle", {cx: x(st), cy: y(0), r: 3, fill: "#555"},
                                svg("title", {}, `step ${st}: fell back (${t.fallback[i]})`))); });
  }
  if (h) h.step.forEach((st, i) => { if (h.active[i].length) parts.push(
      svg("rect", {x: x(st), y: H - B + 2, width: 3, height: 6, fill: "#2980b9"},
          svg("title", {}, `step ${st}: harmonized (${h.active[i].join(", ")})`))); });
  return el("div", {}, svg("svg", {width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "series"}, parts),
            el("div", {class: "note"}, "per query: gate S translation (purple) and rotation (orange); seed distance "
               + "(dashed); fell back (grey dot); harmonized (blue tick); recovery (shaded)"));
}

setUp();
draw();
</script>
</body>
</html>
"""


def render_page(data: Any, headline_html: str, uplift_html: str, title: str) -> str:
    """The page with ``data`` (JSON-ready; :mod:`eval.view`) inlined and the report's tables as HTML."""
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    return (_PAGE.replace("__FORMAT__", f"{data['format']} v{data['format_version']}")
            .replace("__TITLE__", html.escape(title)).replace("__PAGE_SIZE__", str(PAGE_SIZE))
            .replace("__HEADLINE__", headline_html).replace("__UPLIFT__", uplift_html)
            .replace("__DATA__", payload))
