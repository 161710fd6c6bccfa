//! Reports as one self-contained HTML file beside `report.md`: the Markdown
//! rendered (pulldown-cmark, tables on), every SVG chart inlined where the
//! Markdown shows it or, for charts it does not show, at the end, and a small
//! stylesheet. No script and nothing fetched: the file opens offline and can be
//! shared alone.

use anyhow::{Context, Result};
use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
use std::path::{Component, Path};

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;color:#222;line-height:1.45}\
table{border-collapse:collapse;margin:1rem 0;font-size:.9rem}th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:right}\
th:first-child,td:first-child{text-align:left}thead{background:#f3f3f3}code,pre{background:#f6f6f6;font-size:.85rem}\
pre{padding:.5rem;overflow-x:auto}figure{margin:1rem 0}svg{max-width:100%;height:auto}";

/// A chart `dir/name` if `name` is a plain relative `.svg` path inside `dir`.
fn chart(dir: &Path, name: &str) -> Option<String> {
    let path = Path::new(name);
    let inside = path.components().all(|c| matches!(c, Component::Normal(_)));
    if !inside || path.extension().is_none_or(|e| e != "svg") {
        return None;
    }
    let svg = std::fs::read_to_string(dir.join(path)).ok()?;
    // The file's own XML declaration is not valid inside HTML.
    let start = svg.find("<svg")?;
    Some(svg[start..].to_owned())
}

/// The page: `markdown` (whose images are paths relative to `dir`) with every
/// chart inlined, then each of `charts` the Markdown did not show.
pub fn page(title: &str, markdown: &str, dir: &Path, charts: &[String]) -> Result<String> {
    let mut shown: Vec<String> = Vec::new();
    let mut events = Vec::new();
    let mut in_image = false;
    for event in Parser::new_ext(markdown, Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Image { ref dest_url, .. }) => match chart(dir, dest_url) {
                Some(svg) => {
                    shown.push(dest_url.to_string());
                    events.push(Event::Html(format!("<figure>{svg}</figure>").into()));
                    in_image = true;
                }
                None => events.push(event),
            },
            // The alt text of an inlined chart is dropped with its end tag.
            Event::End(TagEnd::Image) if in_image => in_image = false,
            _ if in_image => {}
            other => events.push(other),
        }
    }
    let mut body = String::new();
    pulldown_cmark::html::push_html(&mut body, events.into_iter());
    for name in charts.iter().filter(|c| !shown.contains(c)) {
        let svg =
            chart(dir, name).with_context(|| format!("the chart {name} in {}", dir.display()))?;
        body.push_str(&format!(
            "<figure>{svg}<figcaption>{name}</figcaption></figure>\n"
        ));
    }
    let title = escape_html_text(title);
    Ok(format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n"
    ))
}

/// Text in HTML: `&`, `<` and `>` escaped (the title; pulldown-cmark escapes the body).
fn escape_html_text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_inlined_where_shown_or_appended_and_nothing_is_fetched() {
        let dir = tempfile::tempdir().expect("tempdir");
        let svg =
            "<?xml version=\"1.0\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\"><rect/></svg>\n";
        std::fs::write(dir.path().join("a.svg"), svg).expect("a");
        std::fs::write(dir.path().join("b.svg"), svg).expect("b");
        let md = "# Title <x>\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n![chart a](a.svg)\n\n![elsewhere](../secret.svg)\n";
        let html =
            page("t & <u>", md, dir.path(), &["a.svg".into(), "b.svg".into()]).expect("page");
        assert!(html.contains("<title>t &amp; &lt;u&gt;</title>"), "{html}");
        assert!(
            html.contains("<table>") && html.contains("<td>2</td>"),
            "{html}"
        );
        assert_eq!(
            html.matches("<svg").count(),
            2,
            "a where shown, b appended: {html}"
        );
        assert!(!html.contains("<?xml"), "{html}");
        assert!(
            !html.contains("chart a"),
            "the inlined chart's alt text goes with it"
        );
        assert!(html.contains("<figcaption>b.svg</figcaption>"));
        // A path out of the directory is never read; it stays a plain image link.
        assert!(html.contains("src=\"../secret.svg\""), "{html}");
        assert!(!html.contains("<script"), "{html}");
        assert!(page("t", md, dir.path(), &["missing.svg".into()]).is_err());
    }
}
