//! `html`'s tests.

use super::*;

#[test]
fn the_page_is_self_contained() {
    let p = page("a <title>", "<p>x</p>");
    assert!(p.starts_with("<!DOCTYPE html>"));
    assert!(p.contains("<title>a &lt;title&gt;</title>"));
    for banned in ["<script", "<link", "http://", "https://", "@import", "url("] {
        let outside_svg_ns = p.replace("http://www.w3.org/2000/svg", "");
        assert!(!outside_svg_ns.contains(banned), "{banned}");
    }
}
