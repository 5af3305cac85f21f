//! Flame graphs, drawn by inferno (the Rust port of flamegraph.pl) from the
//! collapsed stacks. Its SVG carries its own script for click-to-zoom and
//! search, so both the bare `.svg` and the `.html` page, which inlines that
//! SVG, are self-contained: no network, no external files.

use super::collapsed;
use super::ExportOptions;
use crate::profile::ProfileData;

pub fn export(profile: &ProfileData, opts: &ExportOptions, html: bool) -> Result<Vec<u8>, String> {
    let lines = collapsed::lines(profile, opts);
    let title = title(profile, opts);
    let svg = if lines.is_empty() {
        // inferno refuses empty input; an empty graph is still a valid file.
        empty_svg(&title)
    } else {
        let mut o = inferno::flamegraph::Options::default();
        o.title = title.clone();
        o.subtitle = Some(subtitle(opts));
        o.count_name = "samples".into();
        o.name_type = "Function:".into();
        // Colour by a hash of the name, so a function keeps its colour
        // between graphs of the same program.
        o.hash = true;
        o.deterministic = true;
        // Names start with what matters (`fib (/app/x.js:3:1)`,
        // `v8::internal::…`): cut narrow frames' labels on the right.
        o.text_truncate_direction = inferno::flamegraph::TextTruncateDirection::Right;
        let mut svg = Vec::new();
        inferno::flamegraph::from_lines(&mut o, lines.iter().map(|l| l.trim_end()), &mut svg)
            .map_err(|e| format!("flame graph: {e}"))?;
        svg
    };
    if !html {
        return Ok(svg);
    }
    Ok(html_page(&title, &svg))
}

fn title(profile: &ProfileData, opts: &ExportOptions) -> String {
    let threads = profile.threads.len();
    let secs = profile.end_ns.saturating_sub(profile.start_ns) as f64 / 1e9;
    let kind = if opts.include_idle { "samples" } else { "running samples" };
    format!(
        "machsampler: {} {kind}, {threads} thread{}, {secs:.2} s",
        (0..profile.sample_count())
            .filter(|&i| opts.include_idle || profile.sample_idle[i] == 0)
            .map(|i| profile.weight(i))
            .sum::<u64>(),
        if threads == 1 { "" } else { "s" }
    )
}

fn subtitle(opts: &ExportOptions) -> String {
    match (opts.include_idle, opts.thread_prefix) {
        (false, true) => "Idle samples left out; one tower per thread".into(),
        (false, false) => "Idle samples left out; threads merged".into(),
        (true, true) => "Idle samples included; one tower per thread".into(),
        (true, false) => "Idle samples included; threads merged".into(),
    }
}

fn empty_svg(title: &str) -> Vec<u8> {
    format!(
        concat!(
            r#"<?xml version="1.0" standalone="no"?>"#,
            "\n",
            r#"<svg version="1.1" width="1200" height="60" viewBox="0 0 1200 60" xmlns="http://www.w3.org/2000/svg">"#,
            r#"<text x="600" y="24" text-anchor="middle" font-family="Verdana" font-size="17">{}</text>"#,
            r#"<text x="600" y="48" text-anchor="middle" font-family="Verdana" font-size="12">No samples to draw.</text>"#,
            "</svg>\n"
        ),
        escape(title)
    )
    .into_bytes()
}

/// The SVG inlined in an HTML page. The XML declaration and doctype are
/// dropped (an HTML parser would show them as text); the rest of inferno's
/// SVG, script included, works unchanged inside HTML.
fn html_page(title: &str, svg: &[u8]) -> Vec<u8> {
    let svg = String::from_utf8_lossy(svg);
    let body = svg.find("<svg").map(|i| &svg[i..]).unwrap_or(&svg);
    let mut out = String::with_capacity(body.len() + 1024);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"generator\" content=\"machsampler\">\n<title>");
    out.push_str(&escape(title));
    out.push_str("</title>\n<style>\n");
    out.push_str("html, body { margin: 0; background: #fff; }\n");
    out.push_str("p.help { margin: 4px 10px; font: 12px Verdana, sans-serif; color: #555; }\n");
    out.push_str("svg { display: block; width: 100%; }\n</style>\n</head>\n<body>\n");
    out.push_str(
        "<p class=\"help\">Click a frame to zoom in, \"Reset Zoom\" to go back; \
         \"Search\" (or Ctrl-F) highlights matching functions.</p>\n",
    );
    out.push_str(body);
    out.push_str("\n</body>\n</html>\n");
    out.into_bytes()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;

    #[test]
    fn svg_and_html_hold_every_function() {
        let p = sample_profile();
        let svg = String::from_utf8(export(&p, &ExportOptions::default(), false).unwrap()).unwrap();
        assert!(svg.starts_with("<?xml"));
        for name in ["main (100)", "worker (101)", "b", "c"] {
            assert!(svg.contains(&format!("<title>{name} (")), "{name} missing");
        }
        let html = String::from_utf8(export(&p, &ExportOptions::default(), true).unwrap()).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(!html.contains("<?xml"));
        assert!(html.contains("function init(evt)"), "the zoom/search script is inline");
        assert!(!html.contains("src=\"http"), "nothing is loaded from the network");
    }

    #[test]
    fn empty_profiles_draw_an_empty_graph() {
        let mut p = sample_profile();
        p.sample_idle = vec![1; 4];
        let html = String::from_utf8(export(&p, &ExportOptions::default(), true).unwrap()).unwrap();
        assert!(html.contains("No samples to draw."));
    }
}
