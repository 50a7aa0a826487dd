//! A failing key as a picture: one self-contained HTML page (inline SVG, no scripts or
//! external files) per key the gate found a violation on. One lane per client, each
//! operation a bar from its call to its answer coloured by outcome and labelled with its
//! token's revision; the store's writes to the key's holder record on their own lane (put:
//! the revision that created it; delete: the revision that removed it); faults shaded across
//! every lane; the violations written above. Open it in a browser.

use super::history::{Kind, Op, Phase, revision_bits};
use super::store_log::StoreEvent;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A fault as the timeline shades it: what, and when (CLOCK_MONOTONIC ns).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct FaultSpan {
    pub name: String,
    pub target: String,
    pub from: u64,
    pub to: u64,
}

const LANE: f64 = 26.0;
const WIDTH: f64 = 1400.0;
const LEFT: f64 = 90.0;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn colour(op: &Op) -> &'static str {
    match op.done {
        Some((_, Phase::Ok)) => "#2e7d32",
        Some((_, Phase::Fail)) => "#ef6c00",
        _ => "#9e9e9e",
    }
}

/// The page for `key`: its operations, the store's events on its holder record, the
/// faults, and what was found.
pub fn render(
    key: &str,
    ops: &[&Op],
    store: &[&StoreEvent],
    faults: &[FaultSpan],
    findings: &[String],
) -> String {
    let t0 = ops.iter().map(|o| o.invoked).min().unwrap_or(0);
    let end = ops
        .iter()
        .map(|o| o.returned().unwrap_or(o.invoked))
        .chain(store.iter().map(|e| e.seen))
        .max()
        .unwrap_or(t0)
        .max(t0 + 1);
    let span = (end - t0) as f64;
    let x = |t: u64| LEFT + (t.saturating_sub(t0) as f64 / span) * (WIDTH - LEFT - 10.0);
    let mut lanes: BTreeMap<u32, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        lanes.entry(op.client).or_default().push(op);
    }
    // The store's lane is three rows deep: its marks' labels are staggered so that close
    // revisions stay readable.
    let height = LANE * (lanes.len() as f64 + 4.0) + 20.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="monospace" font-size="10">"#
    );
    for f in faults.iter().filter(|f| f.to >= t0 && f.from <= end) {
        let (a, b) = (x(f.from.max(t0)), x(f.to.min(end)));
        let _ = write!(
            svg,
            r##"<rect x="{a:.1}" y="0" width="{:.1}" height="{height}" fill="#b3e5fc" opacity="0.5"><title>{}</title></rect><text x="{a:.1}" y="{:.1}" fill="#0277bd">{}</text>"##,
            (b - a).max(1.0),
            escape(&format!("{} on {}", f.name, f.target)),
            height - 4.0,
            escape(&f.name)
        );
    }
    for (row, (client, ops)) in lanes.iter().enumerate() {
        let y = LANE * (row as f64 + 1.0);
        let _ = write!(
            svg,
            r#"<text x="4" y="{:.1}">client {client}</text>"#,
            y + 12.0
        );
        for op in ops {
            let (a, b) = (x(op.invoked), x(op.returned().unwrap_or(end)));
            let token = op
                .token
                .map(|t| format!(" r{}", revision_bits(t)))
                .unwrap_or_default();
            let kind = match op.kind {
                Kind::Acquire => "acq",
                Kind::Release => "rel",
                Kind::Write => "reg",
                Kind::PgWrite => "pg",
                _ => "op",
            };
            let title = format!(
                "{:?} session {:x}{token} {}{}{}{}",
                op.kind,
                op.session.unwrap_or(0),
                op.why.as_deref().unwrap_or(match op.done {
                    Some((_, Phase::Ok)) => "ok",
                    _ => "unknown",
                }),
                op.via
                    .as_deref()
                    .map(|v| format!(" via {v}"))
                    .unwrap_or_default(),
                op.served
                    .as_deref()
                    .map(|a| format!(", served by {a}"))
                    .unwrap_or_default(),
                op.rev
                    .map(|r| format!(", deleted at r{r}"))
                    .unwrap_or_default(),
            );
            let _ = write!(
                svg,
                r#"<rect x="{a:.1}" y="{:.1}" width="{:.1}" height="16" fill="{}" rx="2"><title>{}</title></rect><text x="{a:.1}" y="{:.1}" fill="white">{kind}{token}</text>"#,
                y + 2.0,
                (b - a).max(2.0),
                colour(op),
                escape(&title),
                y + 13.0
            );
        }
    }
    let y = LANE * (lanes.len() as f64 + 1.0);
    let _ = write!(svg, r#"<text x="4" y="{:.1}">etcd</text>"#, y + 12.0);
    for (i, e) in store.iter().enumerate() {
        let a = x(e.seen);
        let row = (i % 3) as f64 * LANE;
        let (mark, fill) = if e.delete {
            (format!("del r{}", e.revision), "#c62828")
        } else {
            (format!("put r{}", e.revision), "#1565c0")
        };
        let _ = write!(
            svg,
            r#"<line x1="{a:.1}" x2="{a:.1}" y1="{:.1}" y2="{:.1}" stroke="{fill}" stroke-width="2"><title>{} lease {:x} (seen by the watch)</title></line><text x="{:.1}" y="{:.1}" fill="{fill}">{mark}</text>"#,
            y + 2.0,
            y + 18.0 + row,
            escape(&mark),
            e.lease,
            a + 2.0,
            y + 13.0 + row
        );
    }
    svg.push_str("</svg>");
    let mut page = String::new();
    let _ = write!(
        page,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>gate: {k}</title></head><body style=\"font-family:sans-serif\"><h2>{k}</h2><p>{:.1} s of history. Green: ok; orange: refused; grey: outcome unknown (bars run to the end). Blue bands: faults. Hover for details.</p><ul>",
        span / 1e9,
        k = escape(key)
    );
    for f in findings {
        let _ = write!(page, "<li>{}</li>", escape(f));
    }
    page.push_str("</ul>");
    page.push_str(&svg);
    page.push_str("</body></html>\n");
    page
}
