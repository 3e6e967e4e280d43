//! `report.html` of a `lowcomm compare` sweep: one self-contained file
//! (CSS and the SVG plots inline, no script, no link, no URL of any kind),
//! so it opens in a browser with no network and can be mailed as is.

use super::table::{Table, Tables};
use std::fmt::Write as _;

/// What the report shows besides the tables.
pub struct Page<'a> {
    /// The command line that made it.
    pub command: &'a str,
    /// The machine and simulated cluster, as (what, value).
    pub machine: &'a [(String, String)],
    /// The plots, `(file name, SVG document)`.
    pub plots: &'a [(&'static str, String)],
    /// Lines about the table (target loss, clock).
    pub legend: &'a [String],
    /// Per-method notes: the settings each ran with, skipped (and why), reused.
    pub notes: &'a [String],
    /// The recommendation, then why each other method lost.
    pub verdict: &'a [String],
}

/// `s` with `&`, `<`, `>` and `"` escaped (text and attribute values).
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// An SVG document as an element to put inside HTML: no XML declaration,
/// and no namespace attribute (HTML puts `<svg>` in the SVG namespace
/// itself; the attribute's value is a URL the report must not hold).
fn inline_svg(svg: &str) -> String {
    let body = match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => svg,
    };
    let mut out = String::with_capacity(body.len());
    let mut rest = body;
    while let Some(i) = rest.find(" xmlns") {
        out += &rest[..i];
        let after = &rest[i + 1..];
        // Skip ` xmlns[:x]="..."`.
        match after.find('"').and_then(|q| after[q + 1..].find('"').map(|e| q + 1 + e + 1)) {
            Some(end) => rest = &after[end..],
            None => {
                rest = after;
                break;
            }
        }
    }
    out + rest
}

/// `s` escaped, with markdown's `**bold**` as `<strong>` (the tables'
/// cells are shared with summary.md).
fn rich(s: &str) -> String {
    let mut out = String::new();
    for (i, part) in escape(s).split("**").enumerate() {
        if i % 2 == 1 {
            out += &format!("<strong>{part}</strong>");
        } else {
            out += part;
        }
    }
    out
}

fn table_html(t: &Table) -> String {
    let cells = |tag: &str, row: &[String]| -> String {
        row.iter().map(|c| format!("<{tag}>{}</{tag}>", rich(c))).collect::<String>()
    };
    let mut s = format!("<table>\n<thead><tr>{}</tr></thead>\n<tbody>\n", cells("th", &t.head));
    for r in &t.rows {
        s += &format!("<tr>{}</tr>\n", cells("td", r));
    }
    s + "</tbody>\n</table>\n"
}

/// Each line of `items` as a list item.
fn list_html(items: &[String]) -> String {
    let li: String = items.iter().map(|l| format!("<li>{}</li>\n", rich(l))).collect();
    format!("<ul>\n{li}</ul>\n")
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em;max-width:1200px;color:#222}\
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}\
th,td{border:1px solid #bbb;padding:0.3em 0.6em;text-align:right}\
th{background:#eee}td:first-child,th:first-child{text-align:left}\
pre{background:#f4f4f4;padding:0.8em;white-space:pre-wrap;word-break:break-all}\
figure{margin:1em 0}figcaption{font-size:0.9em;color:#555}\
td strong{color:#b00}p.verdict{font-weight:bold;font-size:1.1em}";

/// The whole report.
pub fn render(page: &Page, tables: &Tables) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>lowcomm compare</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>lowcomm compare</h1>\n"
    );
    let _ = write!(h, "<h2>Command</h2>\n<pre>{}</pre>\n", escape(page.command));
    h += "<h2>Machine and cluster</h2>\n<table>\n<tbody>\n";
    for (k, v) in page.machine {
        let _ = writeln!(h, "<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(v));
    }
    h += "</tbody>\n</table>\n<h2>Results</h2>\n";
    h += &table_html(&tables.main);
    h += &list_html(page.legend);
    h += "<h2>Plots</h2>\n";
    for (name, svg) in page.plots {
        let _ = write!(h, "<figure>\n{}\n<figcaption>{}</figcaption>\n</figure>\n", inline_svg(svg), escape(name));
    }
    h += "<h2>Time per round</h2>\n<p>Averaged over workers: c = compute, m = communication.</p>\n";
    h += &table_html(&tables.per_round);
    h += "<h2>Bytes per worker per round</h2>\n<p>Ring model; tiers as in the table above; largest transfer: the most one worker sent in one collective or message, the peak its link must carry at once.</p>\n";
    h += &table_html(&tables.bytes);
    h += "<h2>Notes</h2>\n";
    h += &list_html(page.notes);
    h += "<h2>Verdict</h2>\n";
    if let Some((first, rest)) = page.verdict.split_first() {
        let _ = writeln!(h, "<p class=\"verdict\">{}</p>", rich(first));
        h += &list_html(rest);
    }
    h + "</body>\n</html>\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_svgs_lose_their_namespace_url() {
        assert_eq!(escape("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
        let svg = "<?xml version=\"1.0\"?>\n<svg width=\"8\" xmlns=\"http://www.w3.org/2000/svg\" height=\"5\"><path d=\"M0 0\"/></svg>";
        assert_eq!(inline_svg(svg), "<svg width=\"8\" height=\"5\"><path d=\"M0 0\"/></svg>");
        let plots = [("p.svg", svg.to_string())];
        let t = || Table { head: vec!["method".into()], rows: vec![vec!["<co2>".into()]] };
        let tables = Tables { main: t(), per_round: t(), bytes: t() };
        let notes = ["acco: skipped: <why>".to_string()];
        let machine = [("cpu".to_string(), "x".to_string())];
        let page = Page {
            command: "lowcomm compare --methods all",
            machine: &machine,
            plots: &plots,
            legend: &[],
            notes: &notes,
            verdict: &["Recommendation: acco".to_string(), "co2: **unstable**".to_string()],
        };
        let html = render(&page, &tables);
        assert!(!html.contains("http") && !html.contains("<?xml"), "{html}");
        assert!(html.contains("<td>&lt;co2&gt;</td>") && html.contains("skipped: &lt;why&gt;"), "{html}");
        // The verdict ends the page; markdown's bold is HTML's.
        assert!(
            html.trim_end().ends_with("<li>co2: <strong>unstable</strong></li>\n</ul>\n</body>\n</html>"),
            "{html}"
        );
        assert!(html.contains("<p class=\"verdict\">Recommendation: acco</p>"), "{html}");
    }
}
