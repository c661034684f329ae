//! The README's `XdsChannel` snippet is an excerpt of `examples/xds_channel.rs`, which CI
//! compiles and runs: this test keeps it one, line for line (indentation aside).

const README: &str = include_str!("../../README.md");
const EXAMPLE: &str = include_str!("../examples/xds_channel.rs");
const MARKER: &str = "<!-- an excerpt of xds_channel.rs";

fn trimmed(text: &str) -> Vec<&str> {
    text.lines().map(str::trim).collect()
}

#[test]
fn the_readme_channel_snippet_is_an_excerpt_of_the_example() {
    let after = README
        .split_once(MARKER)
        .expect("the README marks its excerpt")
        .1;
    let block = after
        .split_once("```rust,ignore\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .expect("a rust code block follows the marker")
        .0;
    let excerpt = trimmed(block);
    assert!(excerpt.len() >= 5, "{excerpt:?}");
    let example = trimmed(EXAMPLE);
    assert!(
        example.windows(excerpt.len()).any(|w| w == excerpt),
        "the README's snippet is no longer a verbatim excerpt of examples/xds_channel.rs:\n{block}"
    );
}
