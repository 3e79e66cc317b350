"""Text boxes of drawn plotly figures, measured in the browser: every title, subtitle, tick label,
axis title, note (annotation) and legend entry must lie inside its figure, and no two of them may
overlap (a title over its subtitle, a note over rotated tick labels, a legend over an axis title).

`JS_TEXT_PROBLEMS` takes a figure's element (`.js-plotly-plot`) and returns one line per problem;
tests/test_figures_boxes.py runs it on every figure the notebooks and the report draw, at notebook
and slide size, and tests/test_browser.py on every figure of the notebooks after Run All."""
from __future__ import annotations

# Boxes are the browser's (getBoundingClientRect), in screen pixels, each with a group: "title",
# "subtitle", "xtick:<axis>", "ytick:<axis>", "axistitle", "note", "legend", "colorbar", "bartext"
# (a bar's label: checked against the figure's edge, other bars' labels and the ticks). Two boxes of
# one tick group may touch (plotly spaces them), rotated ticks are compared with others by their
# box (an upper bound of the text). A box that is empty (no text) is skipped. TOL_PX: anti-aliasing.
JS_TEXT_PROBLEMS = r"""gd => {
  const TOL = 1.5, out = [], boxes = [];
  const svg = gd.querySelector('.main-svg'); if (!svg) return ['no svg'];
  const F = svg.getBoundingClientRect();
  const add = (el, group) => { const r = el.getBoundingClientRect();
    const txt = (el.textContent || '').trim();
    if (r.width < 0.5 || r.height < 0.5 || !txt) return;
    const rot = /rotate\((?!0[,)])/.test(el.getAttribute('transform') || '') ||
                /rotate\((?!0[,)])/.test((el.parentNode && el.parentNode.getAttribute && el.parentNode.getAttribute('transform')) || '');
    boxes.push({group, txt: txt.slice(0, 40), l: r.left, r: r.right, t: r.top, b: r.bottom, rot}); };
  gd.querySelectorAll('.gtitle').forEach(e => add(e, 'title'));
  gd.querySelectorAll('.gtitle-subtitle').forEach(e => add(e, 'subtitle'));
  gd.querySelectorAll('g[class$="tick"] > text, g[class$="tick2"] > text').forEach(e => {
    const g = e.parentNode.getAttribute('class'); if (e.closest('.colorbar')) return;  // a colour bar's: below
    add(e, (g.startsWith('y') ? 'ytick:' : 'xtick:') + g); });
  gd.querySelectorAll('.g-xtitle, .g-ytitle, [class^="g-x"][class$="title"], [class^="g-y"][class$="title"]')
    .forEach(e => add(e, 'axistitle'));
  gd.querySelectorAll('.infolayer .annotation, .annotation').forEach(e => {
    const t = e.querySelector('.annotation-text-g') || e; add(t, 'note'); });
  gd.querySelectorAll('.legend .traces').forEach(e => add(e, 'legend'));
  gd.querySelectorAll('.legend .legendtitletext').forEach(e => add(e, 'legend'));
  gd.querySelectorAll('.colorbar text').forEach(e => add(e, 'colorbar'));
  gd.querySelectorAll('text.bartext').forEach(e => { add(e, 'bartext');
    const tf = e.getAttribute('transform') || '';  // plotly turns a label that does not fit its bar upright
    if (/rotate\((-?90)/.test(tf) && e.closest('.trace') && e.closest('.trace').__data__ &&
        e.closest('.trace').__data__[0].trace.orientation === 'h') out.push(`turned: bar text "${e.textContent}"`); });
  const seen = new Set(), uniq = boxes.filter(b => { const k = [b.group, b.txt, Math.round(b.l), Math.round(b.t)].join('|');
    if (seen.has(k)) return false; seen.add(k); return true; });
  for (const b of uniq) if (b.l < F.left - TOL || b.r > F.right + TOL || b.t < F.top - TOL || b.b > F.bottom + TOL)
    out.push(`clipped: ${b.group} "${b.txt}" [${Math.round(b.l - F.left)},${Math.round(b.t - F.top)}–${Math.round(b.r - F.left)},${Math.round(b.b - F.top)}] outside ${Math.round(F.width)}x${Math.round(F.height)}`);
  for (let i = 0; i < uniq.length; i++) for (let j = i + 1; j < uniq.length; j++) {
    const a = uniq[i], c = uniq[j];
    if (a.group === c.group && (a.group.includes('tick') ? (a.rot || c.rot) : a.group !== 'note')) continue;
    if (a.group === c.group && a.group === 'legend') continue;
    if ((a.group === 'bartext') !== (c.group === 'bartext') && [a.group, c.group].some(g => g.includes('tick'))) {}
    else if (a.group === 'bartext' || c.group === 'bartext') { if (a.group !== c.group) continue; }
    const w = Math.min(a.r, c.r) - Math.max(a.l, c.l), h = Math.min(a.b, c.b) - Math.max(a.t, c.t);
    if (w > TOL && h > TOL) out.push(`overlap: ${a.group} "${a.txt}" and ${c.group} "${c.txt}" (${Math.round(w)}x${Math.round(h)} px)`);
  }
  return out; }"""


def problems(page, selector: str = ".js-plotly-plot") -> dict:
    """{figure's title (or its index): [problem lines]} for every drawn figure on the page that has any."""
    found = page.evaluate(f"""() => Array.from(document.querySelectorAll({selector!r})).map((gd, i) => {{
        const t = gd.layout && gd.layout.title; const name = (t && (t.text || t)) || ('figure ' + i);
        return [String(name).split('<br>')[0].slice(0, 80) + ' #' + i, ({JS_TEXT_PROBLEMS})(gd)]; }})""")
    return {name: p for name, p in found if p}
