//! R7: chat-bound text passes a redactor before it leaves the process — tokens and keys in common
//! formats, plus patterns from the configuration.

use regex::Regex;

/// Built-in secret formats.
const BUILT_IN: &[&str] = &[
    r"xox[abposr]-[A-Za-z0-9-]{10,}",          // Slack tokens
    r"xapp-[0-9]-[A-Za-z0-9-]{10,}",           // Slack app-level tokens
    r"gh[pousr]_[A-Za-z0-9]{36,}",             // GitHub tokens
    r"github_pat_[A-Za-z0-9_]{22,}",           // GitHub fine-grained tokens
    r"(?:AKIA|ASIA)[A-Z0-9]{16}",              // AWS access key ids
    r"(?i)aws_secret_access_key\s*[=:]\s*\S+", // AWS secret keys in config/env form
    r"(?i)bearer\s+[A-Za-z0-9._~+/=-]{16,}",   // bearer tokens
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----", // PEM private keys
];

/// Replaces secrets with `[redacted]`.
#[derive(Debug, Clone)]
pub struct Redactor {
    patterns: Vec<Regex>,
}

impl Redactor {
    /// The built-in formats plus `extra` patterns.
    ///
    /// # Errors
    /// The first configured pattern that is not a valid regular expression.
    pub fn new(extra: &[String]) -> Result<Self, regex::Error> {
        let mut patterns = Vec::new();
        for p in BUILT_IN
            .iter()
            .copied()
            .chain(extra.iter().map(String::as_str))
        {
            patterns.push(Regex::new(p)?);
        }
        Ok(Self { patterns })
    }

    /// `text` with every match replaced.
    #[must_use]
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for p in &self.patterns {
            if p.is_match(&out) {
                out = p.replace_all(&out, "[redacted]").into_owned();
            }
        }
        out
    }
}

impl Default for Redactor {
    fn default() -> Self {
        Self::new(&[]).unwrap_or(Self {
            patterns: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r7_common_secret_formats_are_redacted() {
        let r = Redactor::default();
        let cases = [
            "token xoxb-123456789012-abcdefghijkl",
            "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "key AKIAABCDEFGHIJKLMNOP",
            "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "Authorization: Bearer abcdefghijklmnopqrstuvwxyz",
            "-----BEGIN RSA PRIVATE KEY-----\nMIIE...\n-----END RSA PRIVATE KEY-----",
        ];
        for c in cases {
            let out = r.redact(c);
            assert!(out.contains("[redacted]"), "{c} -> {out}");
        }
        assert_eq!(r.redact("plain output 42"), "plain output 42");
    }

    #[test]
    fn r7_configured_patterns_apply_and_bad_ones_are_refused() {
        let r = Redactor::new(&["internal-[0-9]{4}".into()]).expect("valid");
        assert_eq!(r.redact("host internal-1234 up"), "host [redacted] up");
        assert!(Redactor::new(&["(".into()]).is_err());
    }
}
