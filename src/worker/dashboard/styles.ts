/**
 * The stylesheet, served from /dashboard/assets/dashboard.css: the CSP allows
 * styles from 'self' only, so there is no inline <style> or style="" anywhere.
 *
 * Text from outside (a receiver's body, URLs, subjects, errors, payloads) can be
 * one unbroken run of any length: a 2 KB 503 body made a delivery page 15,000 px
 * wide. `.mono`, `pre` and `.error` may break it anywhere; `overflow-wrap:
 * anywhere` (unlike `break-word`) also shrinks the width a table sizes the column
 * by. Such a column would then take all the room, so an error cell keeps 10rem.
 * `.nowrap` is for short text of a known length only (a shortened id, `…` and 12
 * characters): broken anywhere, it would stack in a narrow column a character or
 * few a line. An id shown whole (a QStash message id) goes in a `td.id`, which
 * keeps 14rem: a `msg_` id of 26 characters stays on one line with the `;` after
 * it, a longer one breaks into lines as long, never a few characters each.
 *
 * A table of many such columns is wider than a phone or a narrow window: every
 * table sits in a `div.scroll` (layout.tsx's `Table`) and scrolls sideways in that
 * box, the page keeping its width. In a narrow window the header's links take a
 * line of their own under the name and "Sign out", and wrap there, instead of
 * running past the header's edge (light text on the page's light background).
 * A button's label never wraps inside it ("Retr" / "y").
 *
 * Scrolling sideways hides what a row says at its end, and what can be done to it
 * (an alert's Resolve, a delivery's Redeliver): a list of rows (`Table stack`)
 * becomes, below 70rem, one block a row, each cell a line led by its column's name
 * (`data-label`, as the header row is hidden); below 30rem the name goes above the
 * cell, and a table of names and values (`.kv`) puts each name above its value.
 * An empty cell is left out there: its name alone ran into the next one's
 * (an attempt's "ERROR" above its "RESPONSE", the dashboard walkthrough).
 * The header row is hidden by clipping, not `display:none`, so a screen reader
 * still has the column headers (a walkthrough at 1024 px found none), and the
 * drawn names carry empty alternative text (`/ ""`) so they are not read twice;
 * a browser without that syntax keeps the plain `content` before it.
 * Borders of inputs and secondary buttons are 3:1 against the page (WCAG 1.4.11);
 * a primary button's border is transparent, which forced-colours mode draws.
 * The name floats in the cell's left padding and the cell is a formatting root, so
 * the cell is as tall as its name however short its value: positioned absolutely,
 * a name beside an empty cell (no error) ran onto the next row's.
 */
export const DASHBOARD_CSS = `
:root{--fg:#1d2330;--muted:#5d6678;--line:#dde1e8;--bg:#f6f7f9;--card:#fff;--accent:#2557d6;--bad:#b42318;--ok:#067647;--warn:#b54708}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--fg);background:var(--bg)}
header.top{display:flex;flex-wrap:wrap;align-items:center;gap:.4rem 1.5rem;padding:.6rem 1.5rem;background:#111827;color:#fff}
header.top .brand{font-weight:600;letter-spacing:.02em;white-space:nowrap}
header.top nav{display:flex;flex-wrap:wrap;gap:.3rem 1rem;flex:1}
header.top a{color:#cbd5e1;text-decoration:none;white-space:nowrap}
header.top a[aria-current=page]{color:#fff;border-bottom:2px solid #fff}
header.top form{margin:0 0 0 auto}
@media (max-width:48rem){header.top nav{order:3;flex-basis:100%}}
header.top button{background:none;border:1px solid #475569;color:#cbd5e1;border-radius:4px;padding:.2rem .6rem;cursor:pointer}
main{max-width:78rem;margin:0 auto;padding:1.2rem 1.5rem 3rem}
h1{font-size:1.35rem;margin:.2rem 0 1rem}
h2{font-size:1.05rem;margin:1.6rem 0 .6rem}
h1.mono{font-size:1.2rem;word-break:break-all}
a{color:var(--accent)}
.muted{color:var(--muted)}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(8.5rem,1fr));gap:.8rem}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:.7rem .9rem}
.card .label{color:var(--muted);font-size:.8rem;text-transform:uppercase;letter-spacing:.04em}
.card .value{font-size:1.5rem;font-weight:600}
.card .value a{color:inherit}
.card.bad .value{color:var(--bad)}.card.ok .value{color:var(--ok)}.card.warn .value{color:var(--warn)}
.panel{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:.8rem 1rem;margin:.8rem 0}
.panel>p:first-child{margin-top:0}.panel>p:last-child{margin-bottom:0}
table{border-collapse:collapse;width:100%;background:var(--card)}
th,td{border-bottom:1px solid var(--line);padding:.35rem .55rem;text-align:left;vertical-align:top}
th{font-size:.78rem;text-transform:uppercase;letter-spacing:.04em;color:var(--muted);font-weight:600}
table.kv th{width:12rem;text-transform:none;font-size:.9rem;letter-spacing:0}
td.num,th.num{text-align:right}
td.time{white-space:nowrap}
.nowrap{white-space:nowrap}
th.pick,td.pick{width:2rem}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.85em;overflow-wrap:anywhere}
.error{color:var(--bad);white-space:pre-wrap;word-break:break-word}
td.error{min-width:10rem}
td.id{min-width:14rem}
.scroll{overflow-x:auto;position:relative}
pre{background:#0f172a;color:#e2e8f0;padding:.8rem;border-radius:6px;overflow:auto;max-height:28rem;white-space:pre-wrap;overflow-wrap:anywhere}
.skip{position:absolute;left:-9999px;top:.5rem;z-index:2;background:var(--card);padding:.4rem .7rem;border-radius:6px}
.skip:focus{left:1rem}
main:focus{outline:none}
.unseen{position:absolute;width:1px;height:1px;overflow:hidden;clip-path:inset(50%);white-space:nowrap}
.live{color:var(--muted);font-size:.85rem;margin:0 0 .6rem}
.notice{background:#ecfdf3;border:1px solid #abefc6;padding:.5rem .8rem;border-radius:6px}
.alert-box{background:#fef3f2;border:1px solid #fecdca;padding:.5rem .8rem;border-radius:6px}
.state{display:inline-block;padding:0 .45rem;border-radius:999px;font-size:.8rem;font-weight:600}
.state-pending{background:#fffaeb;color:var(--warn)}.state-fanned{background:#ecfdf3;color:var(--ok)}.state-poisoned{background:#fef3f2;color:var(--bad)}
.state-delivered{background:#ecfdf3;color:var(--ok)}.state-failed{background:#fef3f2;color:var(--bad)}
form.filters{display:flex;flex-wrap:wrap;gap:.6rem;align-items:end;margin-bottom:.8rem}
form.filters label{display:flex;flex-direction:column;font-size:.8rem;color:var(--muted)}
input,select,textarea{font:inherit;padding:.25rem .4rem;border:1px solid #7d8595;border-radius:4px}
.desc{white-space:pre-line}
button{font:inherit;cursor:pointer}
.btn{background:var(--accent);color:#fff;border:1px solid transparent;border-radius:4px;padding:calc(.3rem - 1px) calc(.8rem - 1px);white-space:nowrap}
.btn.secondary{background:#fff;color:var(--fg);border:1px solid #7d8595}
.btn.danger{background:var(--bad)}
.btn.small{padding:.05rem .5rem;font-size:.8rem;min-height:24px}
td.num>a{display:inline-block;min-width:24px;min-height:24px}
details.confirm{display:inline-block}
details.confirm>summary{display:inline-block;cursor:pointer;list-style:none}
details.confirm>summary::-webkit-details-marker{display:none}
details.confirm[open]>summary:not(:focus-visible){box-shadow:0 0 0 2px var(--line)}
details.confirm>summary:focus-visible{outline:2px solid var(--accent);outline-offset:2px}
.confirm-body{margin-top:.4rem;padding:.5rem .7rem;border:1px solid var(--line);border-radius:6px;background:var(--card);max-width:36rem}
.confirm-body p{margin:0 0 .4rem}
.actions form{display:flex;flex-wrap:wrap;gap:.4rem;align-items:center;margin:0}
.actions label{font-size:.85rem;color:var(--muted)}
.inline{display:inline}
.group{background:var(--card);border:1px solid var(--line);border-radius:8px;margin:.9rem 0;padding:.8rem 1rem}
.group h2,.group h3{margin:0 0 .3rem;font-size:.95rem;font-family:ui-monospace,monospace;word-break:break-word}
.group .meta{color:var(--muted);font-size:.85rem;margin-bottom:.5rem}
.actions{display:flex;flex-wrap:wrap;gap:.6rem;align-items:center;margin:.5rem 0}
figure.chart{margin:0}
.chart{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:.6rem}
.chart .plot{display:grid;grid-template-columns:auto 1fr;column-gap:.4rem;padding:.5em 0 0}
.chart .plot>svg{width:100%;height:8rem;display:block;overflow:visible}
.y-axis{display:flex;flex-direction:column;justify-content:space-between;align-items:flex-end;font-size:.75rem;line-height:1;color:var(--muted);font-variant-numeric:tabular-nums}
.y-axis span:first-child{transform:translateY(-50%)}
.y-axis span:last-child{transform:translateY(50%)}
.x-axis{grid-column:2;display:flex;justify-content:space-between;font-size:.75rem;color:var(--muted);margin-top:.5em;font-variant-numeric:tabular-nums}
.legend{display:flex;gap:1rem;font-size:.85rem;color:var(--muted)}
.chart svg.swatch{display:inline-block;width:22px;height:8px;margin-right:.3rem;vertical-align:middle}
details.minutes{margin-top:.4rem;font-size:.85rem}
details.minutes table{margin-top:.3rem;max-width:24rem}
.pager{display:flex;gap:1rem;margin-top:.8rem}
.login{max-width:22rem;margin:12vh auto;background:var(--card);border:1px solid var(--line);border-radius:10px;padding:1.4rem}
.login input{width:100%;margin:.4rem 0 .8rem}
details.edit{margin:1rem 0}
details.edit form{display:flex;flex-direction:column;gap:.3rem;max-width:40rem;margin-top:.5rem}
details.edit label{font-size:.85rem;color:var(--muted)}
details.edit button{align-self:flex-start;margin-top:.4rem}
@media (max-width:70rem){
table.stack,table.stack tbody,table.stack tr,table.stack td{display:block}
table.stack tr:has(>th){position:absolute;width:1px;height:1px;padding:0;border:0;overflow:hidden;clip-path:inset(50%);white-space:nowrap}
table.stack tr{border-bottom:1px solid var(--line);padding:.35rem 0}
table.stack td{border:0;padding:.1rem .55rem .1rem 9.5rem;display:flow-root;min-width:0;text-align:left}
table.stack td::before{content:attr(data-label);content:attr(data-label) / "";float:left;width:8.5rem;margin-left:-8.95rem;color:var(--muted);font:.75rem/1.9 system-ui,-apple-system,"Segoe UI",sans-serif;text-transform:uppercase;letter-spacing:.04em}
table.stack td:empty{display:none}
}
@media (max-width:30rem){
table.stack td{padding-left:.55rem}
table.stack td::before{float:none;display:block;width:auto;margin-left:0;line-height:1.45}
table.kv th,table.kv td{display:block;width:auto;border:0;padding:.1rem .55rem}
table.kv tr{display:block;border-bottom:1px solid var(--line);padding:.3rem 0}
table.kv td.error{min-width:0}
}
.timeline{list-style:none;padding:0;margin:0}
.timeline li{padding:.35rem 0 .35rem 1rem;border-left:2px solid var(--line);position:relative}
`;

/**
 * The tab icon: an arrow leaving a box. Served beside the stylesheet and named by
 * every page, so browsers stop asking for /favicon.ico, which is a 404 in the
 * Worker's error envelope and a console error on every dashboard page.
 */
export const DASHBOARD_ICON = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" fill="#111827"/><path d="M4 8h7M8.5 5l3 3-3 3" fill="none" stroke="#34d399" stroke-width="2" stroke-linecap="round" stroke-linejoin="round"/></svg>`;
