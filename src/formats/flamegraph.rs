//! Flame graphs. The `.svg` is drawn by inferno (the Rust port of
//! flamegraph.pl) from the collapsed stacks, with its own script for zoom
//! and search. The `.html` page is our own: the call trees as data and a
//! small script (`flamegraph.js`) that draws them top-down, with a thread
//! picker and a search that survives switching threads. Top-down because
//! a page opens at its top: the roots and the widest frames are on the
//! first screen however deep the stacks are (a bottom-up graph of deep
//! Node stacks puts them 2,000 px below). Both files are self-contained:
//! no network, no external files. See
//! docs/design/profiling-what-users-run.md.

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::collapsed;
use super::names::{resolve, thread_label};
use super::tree::{CallTree, SampleFilter};
use super::ExportOptions;
use crate::profile::{FunctionKind, ProfileData};

const SCRIPT: &str = include_str!("flamegraph.js");

pub fn export(profile: &ProfileData, opts: &ExportOptions, html: bool) -> Result<Vec<u8>, String> {
    if html {
        return Ok(html_page(profile, opts));
    }
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
        let lines: Vec<String> = lines.iter().map(|l| xml_chars(l.trim_end())).collect();
        inferno::flamegraph::from_lines(&mut o, lines.iter().map(String::as_str), &mut svg)
            .map_err(|e| format!("flame graph: {e}"))?;
        svg
    };
    Ok(svg)
}

#[derive(Serialize)]
struct PageData {
    title: String,
    subtitle: String,
    total: u64,
    strings: Vec<String>,
    /// Per string: `j` JavaScript, `n` native, `u` unresolved.
    kinds: Vec<&'static str>,
    threads: Vec<ThreadTree>,
}

/// One thread's call tree, parents first.
#[derive(Serialize, Default)]
struct ThreadTree {
    label: String,
    samples: u64,
    name: Vec<u32>,
    parent: Vec<i32>,
    value: Vec<u64>,
    #[serde(rename = "self")]
    self_: Vec<u64>,
}

/// The call tree of every thread (or of all threads merged, without
/// `thread_prefix`), busiest thread first.
fn page_data(profile: &ProfileData, opts: &ExportOptions) -> PageData {
    let symbols = resolve(profile);
    let tree = CallTree::build(profile, &symbols);
    let filter = SampleFilter { threads: None, include_idle: opts.include_idle };
    let groups = if opts.thread_prefix { profile.threads.len() } else { 1 };
    let mut counts: Vec<FxHashMap<u32, u64>> = vec![FxHashMap::default(); groups];
    for i in 0..profile.sample_count() {
        if filter.keeps(profile, i) {
            let g = if opts.thread_prefix { profile.sample_thread[i] as usize } else { 0 };
            *counts[g].entry(tree.of_stack[profile.sample_stack[i] as usize]).or_default() += profile.weight(i);
        }
    }
    let mut strings: Vec<String> = Vec::new();
    let mut kinds = Vec::new();
    let mut string_of: FxHashMap<u32, u32> = FxHashMap::default();
    let mut threads = Vec::new();
    for (g, leaves) in counts.iter().enumerate() {
        if leaves.is_empty() {
            continue;
        }
        // Every node with samples and its callers, parents first (tree
        // order is parents first already).
        let mut local: FxHashMap<u32, u32> = FxHashMap::default();
        let mut members: Vec<u32> = Vec::new();
        for &leaf in leaves.keys() {
            for n in tree.path(leaf) {
                local.entry(n).or_insert_with(|| {
                    members.push(n);
                    0
                });
            }
        }
        members.sort_unstable();
        for (k, &n) in members.iter().enumerate() {
            local.insert(n, k as u32);
        }
        let mut t = ThreadTree {
            label: if opts.thread_prefix { thread_label(profile, g) } else { "all threads (merged)".into() },
            ..Default::default()
        };
        for &n in &members {
            let func = tree.func[n as usize];
            let s = *string_of.entry(func).or_insert_with(|| {
                let f = &symbols.functions[func as usize];
                strings.push(f.name.clone());
                kinds.push(match f.kind {
                    FunctionKind::Js => "j",
                    FunctionKind::Native => "n",
                    FunctionKind::Unknown => "u",
                });
                strings.len() as u32 - 1
            });
            t.name.push(s);
            t.parent.push(match tree.parent[n as usize] {
                p if p < 0 => -1,
                p => local[&(p as u32)] as i32,
            });
            let own = leaves.get(&n).copied().unwrap_or(0);
            t.self_.push(own);
            t.value.push(own);
        }
        for k in (0..members.len()).rev() {
            let p = t.parent[k];
            if p >= 0 {
                t.value[p as usize] += t.value[k];
            }
        }
        t.samples = leaves.values().sum();
        threads.push(t);
    }
    threads.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.label.cmp(&b.label)));
    PageData {
        title: title(profile, opts),
        subtitle: subtitle(opts),
        total: threads.iter().map(|t| t.samples).sum(),
        strings,
        kinds,
        threads,
    }
}

/// The page: the data as JSON in a script element (`</` escaped so no
/// name can end it), the script, and the controls.
fn html_page(profile: &ProfileData, opts: &ExportOptions) -> Vec<u8> {
    let data = page_data(profile, opts);
    let json = serde_json::to_string(&data)
        .unwrap_or_default()
        // Every `<` escaped: `<!--` and `<script` in a name would change how
        // the HTML parser ends the element, not only `</script>`.
        .replace('<', "\\u003c")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029");
    let mut out = String::with_capacity(json.len() + SCRIPT.len() + 4096);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"generator\" content=\"machsampler\">\n<title>");
    out.push_str(&escape(&data.title));
    out.push_str("</title>\n<style>\n");
    out.push_str(STYLE);
    out.push_str("</style>\n</head>\n<body>\n<header>\n<h1>");
    out.push_str(&escape(&data.title));
    out.push_str("</h1>\n<p class=\"sub\">");
    out.push_str(&escape(&data.subtitle));
    out.push_str(
        ". Roots at the top, callees below; width is samples. Click a frame to zoom, \
         Ctrl-F searches.</p>\n<div class=\"bar\"><label>Thread <select id=\"thread\"></select></label>\n\
         <input id=\"search\" type=\"search\" placeholder=\"Search functions\" size=\"32\">\n\
         <button id=\"reset\" type=\"button\">Reset zoom</button>\n<span id=\"matched\"></span></div>\n\
         <p id=\"details\">&nbsp;</p>\n</header>\n<main id=\"graph\"></main>\n",
    );
    if data.threads.is_empty() {
        out.push_str("<p class=\"empty\">No samples to draw.</p>\n");
    }
    out.push_str("<script type=\"application/json\" id=\"data\">");
    out.push_str(&json);
    out.push_str("</script>\n<script>\n");
    out.push_str(SCRIPT);
    out.push_str("</script>\n</body>\n</html>\n");
    out.into_bytes()
}

const STYLE: &str = "html, body { margin: 0; background: #fff; font: 12px Verdana, sans-serif; color: #222; }
header { position: sticky; top: 0; z-index: 2; background: #fff; padding: 6px 10px 2px; border-bottom: 1px solid #ddd; }
h1 { font-size: 15px; margin: 0 0 2px; }
p.sub, #details { margin: 2px 0; color: #555; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.bar { display: flex; gap: 10px; align-items: center; margin: 4px 0; }
select { max-width: 520px; }
#matched { color: #a00; font-weight: bold; }
main { position: relative; margin: 4px 10px 20px; }
.f { position: absolute; height: 17px; line-height: 17px; padding: 0 3px; box-sizing: border-box; overflow: hidden;
  white-space: nowrap; text-overflow: ellipsis; cursor: pointer; border-radius: 2px; font-size: 11px; color: #000; }
.f:hover { outline: 1px solid #000; }
.kj { background: #f2d46b; } .kn { background: #f59f6b; } .ku { background: #c8c8c8; } .kt { background: #b6d7f5; }
.anc { opacity: 0.6; }
.hit { background: #e040fb !important; color: #fff; }
.empty { margin: 20px; font-size: 14px; }
";

/// What the graph shows: its samples, and the threads they come from (not
/// every thread seen, most of which may have no sample drawn).
fn title(profile: &ProfileData, opts: &ExportOptions) -> String {
    let secs = profile.end_ns.saturating_sub(profile.start_ns) as f64 / 1e9;
    let kind = if opts.include_idle { "samples" } else { "running samples" };
    let drawn = (0..profile.sample_count()).filter(|&i| opts.include_idle || profile.sample_idle[i] == 0);
    let mut shown = vec![false; profile.threads.len()];
    let mut samples = 0u64;
    for i in drawn {
        samples += profile.weight(i);
        shown[profile.sample_thread[i] as usize] = true;
    }
    let threads = shown.iter().filter(|&&s| s).count();
    format!("machsampler: {samples} {kind}, {threads} thread{}, {secs:.2} s", if threads == 1 { "" } else { "s" })
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

/// `s` with the characters XML 1.0 does not allow (control characters but
/// tab, line feed and carriage return; U+FFFE, U+FFFF) replaced by U+FFFD:
/// one in a name would make the whole SVG unreadable.
fn xml_chars(s: &str) -> String {
    let allowed =
        |c: char| !matches!(c, '\0'..='\u{8}' | '\u{b}' | '\u{c}' | '\u{e}'..='\u{1f}' | '\u{fffe}' | '\u{ffff}');
    s.chars().map(|c| if allowed(c) { c } else { '\u{fffd}' }).collect()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample_profile;

    #[test]
    fn svg_holds_every_function() {
        let p = sample_profile();
        let svg = String::from_utf8(export(&p, &ExportOptions::default(), false).unwrap()).unwrap();
        assert!(svg.starts_with("<?xml"));
        for name in ["main (100)", "worker (101)", "b", "c"] {
            assert!(svg.contains(&format!("<title>{name} (")), "{name} missing");
        }
    }

    #[test]
    fn html_page_holds_per_thread_trees_and_its_script() {
        let p = sample_profile();
        let html = String::from_utf8(export(&p, &ExportOptions::default(), true).unwrap()).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(!html.contains("src=\"http"), "nothing is loaded from the network");
        assert!(html.contains("id=\"thread\""), "a thread picker");
        let start = html.find("id=\"data\">").unwrap() + 10;
        let end = start + html[start..].find("</script>").unwrap();
        let v: serde_json::Value = serde_json::from_str(&html[start..end]).unwrap();
        assert_eq!(v["total"], 3);
        // Busiest thread first: main (2 running samples), then the worker.
        assert_eq!(v["threads"][0]["label"], "main (100)");
        assert_eq!(v["threads"][0]["value"], serde_json::json!([2, 2, 2]));
        assert_eq!(v["threads"][0]["parent"], serde_json::json!([-1, 0, 1]));
        assert_eq!(v["threads"][1]["label"], "worker (101)");
        // Names cannot end the data's script element.
        let mut p = sample_profile();
        p.symbols.as_mut().unwrap().functions[2].name = "</script><b>x".into();
        let html = String::from_utf8(export(&p, &ExportOptions::default(), true).unwrap()).unwrap();
        assert!(!html.contains("</script><b>"));
        // Nor change how the parser finds its end.
        p.symbols.as_mut().unwrap().functions[1].name = "a <!-- b".into();
        p.symbols.as_mut().unwrap().functions[2].name = "c <script> d".into();
        let html = String::from_utf8(export(&p, &ExportOptions::default(), true).unwrap()).unwrap();
        let start = html.find("id=\"data\">").unwrap() + 10;
        let data = &html[start..start + html[start..].find("</script>").unwrap()];
        assert!(!data.contains('<'), "{data}");
        let v: serde_json::Value = serde_json::from_str(data).unwrap();
        assert!(v.to_string().contains("c <script> d"));
    }

    #[test]
    fn svg_stays_xml_whatever_the_names() {
        let mut p = sample_profile();
        p.symbols.as_mut().unwrap().functions[2].name = "esc\u{1b}[31m nul\u{0} <&>".into();
        let svg = String::from_utf8(export(&p, &ExportOptions::default(), false).unwrap()).unwrap();
        assert!(!svg.chars().any(|c| c < ' ' && !matches!(c, '\t' | '\n' | '\r')));
        assert!(svg.contains("esc\u{fffd}[31m nul\u{fffd} &lt;&amp;&gt;"), "{svg}");
    }

    #[test]
    fn title_counts_the_threads_drawn() {
        let mut p = sample_profile();
        assert!(title(&p, &ExportOptions::default()).contains("3 running samples, 2 threads"));
        p.sample_idle = vec![0, 0, 1, 1];
        assert!(title(&p, &ExportOptions::default()).contains("2 running samples, 1 thread,"));
        let all = ExportOptions { include_idle: true, ..ExportOptions::default() };
        assert!(title(&p, &all).contains("4 samples, 2 threads"));
    }

    #[test]
    fn empty_profiles_say_so() {
        let mut p = sample_profile();
        p.sample_idle = vec![1; 4];
        let html = String::from_utf8(export(&p, &ExportOptions::default(), true).unwrap()).unwrap();
        assert!(html.contains("No samples to draw."));
    }
}
