//! What a hash policy does to a request (A42): a header policy hashes the header's
//! value after its `regex_rewrite`, which substitutes every match of the pattern as
//! RE2's `GlobalReplace` does in gRPC C-core (`\0`..`\9` name groups, `\\` is a
//! backslash), so that requests gRPC would send to one endpoint go to the same one here.

use std::borrow::Cow;

use super::{HashPolicy, RegexRewrite};

impl HashPolicy {
    /// The hash a header policy gives the request whose header value (the header's
    /// values joined with `,`) is `value`: [`hash_header_value`] of the value after the
    /// policy's `regex_rewrite`. `None` for a policy that does not hash a header.
    ///
    /// [`hash_header_value`]: crate::lb::hash_header_value
    pub fn header_value_hash(&self, value: &[u8]) -> Option<u64> {
        let HashPolicy::Header { regex_rewrite, .. } = self else {
            return None;
        };
        let rewritten = match regex_rewrite {
            Some(rewrite) => rewrite.apply_bytes(value),
            None => Cow::Borrowed(value),
        };
        Some(crate::lb::hash_header_value(&rewritten))
    }
}

impl RegexRewrite {
    /// `value` with every non-overlapping match of the pattern replaced by the
    /// substitution, as RE2's `GlobalReplace`: `\N` (a digit) inserts group `N` (empty
    /// when it did not take part), `\\` a backslash. As in RE2, a substitution that
    /// names a group the pattern lacks, or holds another escape, leaves the value as it
    /// is.
    pub fn apply<'a>(&self, value: &'a str) -> Cow<'a, str> {
        if !self.substitution_is_valid() {
            return Cow::Borrowed(value);
        }
        self.pattern
            .regex()
            .replace_all(value, Re2Substitution(&self.substitution))
    }

    /// [`apply`](Self::apply) to a header value's bytes; a value that is not UTF-8 (which
    /// no pattern can have been written for) is left as it is.
    pub fn apply_bytes<'a>(&self, value: &'a [u8]) -> Cow<'a, [u8]> {
        match std::str::from_utf8(value) {
            Ok(text) => match self.apply(text) {
                Cow::Borrowed(_) => Cow::Borrowed(value),
                Cow::Owned(rewritten) => Cow::Owned(rewritten.into_bytes()),
            },
            Err(_) => Cow::Borrowed(value),
        }
    }

    /// RE2's check of a rewrite string: every escape is `\\` or `\N` with `N` at most
    /// the pattern's number of capturing groups.
    fn substitution_is_valid(&self) -> bool {
        let groups = self.pattern.regex().captures_len() - 1;
        let mut chars = self.substitution.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                continue;
            }
            match chars.next() {
                Some('\\') => {}
                Some(d) => match d.to_digit(10) {
                    Some(n) if n as usize <= groups => {}
                    _ => return false,
                },
                None => return false,
            }
        }
        true
    }
}

/// An RE2 rewrite string as a `regex` replacer (which would read `$1`, not `\1`).
struct Re2Substitution<'s>(&'s str);

impl regex::Replacer for Re2Substitution<'_> {
    fn replace_append(&mut self, caps: &regex::Captures<'_>, dst: &mut String) {
        let mut chars = self.0.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                dst.push(c);
                continue;
            }
            match chars.next() {
                Some('\\') => dst.push('\\'),
                Some(d) => {
                    let group = d.to_digit(10).and_then(|n| caps.get(n as usize));
                    dst.push_str(group.map_or("", |m| m.as_str()));
                }
                None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::compile_regex;
    use super::*;

    fn rewrite(pattern: &str, substitution: &str) -> RegexRewrite {
        RegexRewrite {
            pattern: compile_regex(pattern, false).unwrap(),
            substitution: substitution.to_owned(),
        }
    }

    #[test]
    fn substitutes_every_match_with_re2_group_references() {
        assert_eq!(rewrite("^u-(.*)$", "\\1").apply("u-alice"), "alice");
        assert_eq!(rewrite("o", "0").apply("foo boo"), "f00 b00");
        assert_eq!(rewrite("(a)(b)?", "[\\2\\1]").apply("a ab"), "[a] [ba]");
        assert_eq!(rewrite("x", "\\\\").apply("axb"), "a\\b");
        assert_eq!(rewrite("a", "$1").apply("a"), "$1", "`$` is literal in RE2");
        assert_eq!(rewrite("z", "y").apply("abc"), "abc");
    }

    #[test]
    fn an_invalid_substitution_leaves_the_value() {
        assert_eq!(rewrite("(a)", "\\2").apply("a"), "a", "no group 2");
        assert_eq!(rewrite("a", "\\q").apply("a"), "a", "unknown escape");
        assert_eq!(rewrite("a", "b\\").apply("a"), "a", "trailing backslash");
    }

    #[test]
    fn header_hash_is_of_the_rewritten_value() {
        let policy = |regex_rewrite| HashPolicy::Header {
            header_name: "x-user".to_owned(),
            regex_rewrite,
            terminal: false,
        };
        let hash = crate::lb::hash_header_value;
        let plain = policy(None);
        assert_eq!(plain.header_value_hash(b"u-alice"), Some(hash(b"u-alice")));
        let stripped = policy(Some(rewrite("^u-", "")));
        assert_eq!(stripped.header_value_hash(b"u-alice"), Some(hash(b"alice")));
        assert_eq!(
            stripped.header_value_hash(b"u-\xff"),
            Some(hash(b"u-\xff")),
            "not UTF-8: unchanged"
        );
        let channel = HashPolicy::ChannelId { terminal: false };
        assert_eq!(channel.header_value_hash(b"alice"), None);
    }
}
