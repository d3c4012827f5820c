//! R7: chat-bound text passes a redactor before it leaves the process — tokens and keys in common
//! formats, plus patterns from the configuration.

use regex::Regex;

/// Built-in secret formats, replaced whole.
const BUILT_IN: &[&str] = &[
    r"xox[abposr]-[A-Za-z0-9-]{10,}",          // Slack tokens
    r"xapp-[0-9]-[A-Za-z0-9-]{10,}",           // Slack app-level tokens
    r"gh[pousr]_[A-Za-z0-9]{36,}",             // GitHub tokens
    r"github_pat_[A-Za-z0-9_]{22,}",           // GitHub fine-grained tokens
    r"(?:AKIA|ASIA)[A-Z0-9]{16}",              // AWS access key ids
    r"(?i)aws_secret_access_key\s*[=:]\s*\S+", // AWS secret keys in config/env form
    r"(?i)bearer\s+[A-Za-z0-9._~+/=-]{16,}",   // bearer tokens
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|\z)", // PEM private keys (also cut short)
    r"eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{8,}",                     // JWTs
    r"AIza[0-9A-Za-z_-]{35}",                         // Google API keys
    r"ya29\.[0-9A-Za-z_-]{20,}",                      // Google OAuth access tokens
    r"\b(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,}", // Stripe keys
    r"\bwhsec_[0-9A-Za-z]{16,}",                      // Stripe webhook secrets
    r"(?i)\b(?:postgres(?:ql)?|mysql|mongodb(?:\+srv)?|redis|amqps?)://[^\s:/@]+:[^\s@]+@", // URL credentials
];

/// `key=value` and `key: value` pairs whose key names a secret: the key stays, the value goes.
const PAIRS: &str = r#"(?i)\b([A-Za-z0-9_.-]*(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|credentials?)[A-Za-z0-9_.-]*)(["']?\s*[=:]\s*)(?:"[^"\n]*"|'[^'\n]*'|[^\s"',;&|]+)"#;

/// The shortest configured secret [`Redactor::with_secrets`] redacts literally.
pub const MIN_LITERAL: usize = 8;

/// Replaces secrets with `[redacted]`.
#[derive(Debug, Clone)]
pub struct Redactor {
    patterns: Vec<Regex>,
    pairs: Option<Regex>,
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
        Ok(Self {
            patterns,
            pairs: Some(Regex::new(PAIRS)?),
        })
    }

    /// Also replaces each of `secrets` wherever it appears literally: the bridge's own tokens (the
    /// platforms' and the daemon's, from [`crate::config::Config`]) never reach a chat even in a
    /// format no pattern knows (`echo $TOKEN` in the built-in shell agent, whose commands inherit
    /// the bridge's environment). Values shorter than [`MIN_LITERAL`] are left to the patterns: a
    /// short word would be redacted wherever it appears.
    #[must_use]
    pub fn with_secrets<'a>(mut self, secrets: impl IntoIterator<Item = &'a str>) -> Self {
        let mut literals: Vec<&str> = secrets
            .into_iter()
            .map(str::trim)
            .filter(|s| s.chars().count() >= MIN_LITERAL)
            .collect();
        // Longest first, so a secret holding another is replaced whole.
        literals.sort_by_key(|s| std::cmp::Reverse(s.len()));
        literals.dedup();
        let mut patterns: Vec<Regex> = literals
            .iter()
            .filter_map(|s| Regex::new(&regex::escape(s)).ok())
            .collect();
        patterns.append(&mut self.patterns);
        self.patterns = patterns;
        self
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
        if let Some(pairs) = &self.pairs
            && pairs.is_match(&out)
        {
            out = pairs.replace_all(&out, "${1}${2}[redacted]").into_owned();
        }
        out
    }
}

impl Default for Redactor {
    fn default() -> Self {
        Self::new(&[]).unwrap_or(Self {
            patterns: Vec::new(),
            pairs: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s2_the_bridges_own_secrets_are_redacted_wherever_they_appear() {
        let discord = "MTA5.discord-bot-token.without-a-known-format";
        let r = Redactor::default().with_secrets([discord, "  api-token-4242  ", "short"]);
        assert_eq!(
            r.redact(&format!("$ echo $TOKEN\n{discord}\nnext")),
            "$ echo $TOKEN\n[redacted]\nnext"
        );
        assert_eq!(r.redact("x=api-token-4242;"), "x=[redacted];");
        // Too short to redact literally without hiding ordinary words.
        assert_eq!(r.redact("a short answer"), "a short answer");
        // The patterns still apply.
        assert!(
            r.redact("ghp_abcdefghijklmnopqrstuvwxyz0123456789")
                .contains("[redacted]")
        );
    }

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
    fn s2_key_value_pairs_jwts_google_and_stripe_keys_are_redacted() {
        let r = Redactor::default();
        let cases = [
            (
                "PASSWORD=hunter2 make deploy",
                "PASSWORD=[redacted] make deploy",
            ),
            ("db_password: 'c0rrect horse'", "db_password: [redacted]"),
            ("export API_KEY=\"abc def\"", "export API_KEY=[redacted]"),
            ("--secret=s3cr3t --verbose", "--secret=[redacted] --verbose"),
            ("curl -H token:abc123&x=1", "curl -H token:[redacted]&x=1"),
            (
                "{\"client_secret\": \"zzz\"}",
                "{\"client_secret\": [redacted]}",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(r.redact(input), want, "{input}");
        }
        for secret in [
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "AIzaSyA1234567890abcdefghijklmnopqrstuv",
            "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
            "rk_test_51H8abcdefghijklmnop",
            "whsec_abcdefghijklmnop1234",
            "ya29.a0AfH6SMBabcdefghijklmnopqrstuvwxyz",
        ] {
            let out = r.redact(&format!("value {secret} end"));
            assert_eq!(out, "value [redacted] end", "{secret}");
        }
        assert_eq!(
            r.redact("postgres://bridge:p/ss@db:5432/x"),
            "[redacted]db:5432/x"
        );
        assert_eq!(r.redact("tokens used: 42"), "tokens used: 42");
        assert_eq!(r.redact("ls -la && make test"), "ls -la && make test");
    }

    #[test]
    fn s2_a_private_key_cut_short_is_still_redacted() {
        let r = Redactor::default();
        let out = r.redact("key:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA");
        assert_eq!(out, "key:\n[redacted]");
    }

    #[test]
    fn r7_configured_patterns_apply_and_bad_ones_are_refused() {
        let r = Redactor::new(&["internal-[0-9]{4}".into()]).expect("valid");
        assert_eq!(r.redact("host internal-1234 up"), "host [redacted] up");
        assert!(Redactor::new(&["(".into()]).is_err());
    }
}
