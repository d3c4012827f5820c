//! URLs as they may be printed (S2): credentials masked, everything else kept so an operator still
//! sees which host, port, database and path are meant.
//!
//! The userinfo (`user:password@`) is found without trusting the URL to be well-formed: a password
//! may hold `/`, `@`, `?` or `#` unescaped, so the authority is taken to end at the *last* `@` before
//! the query rather than at the first `/`. Over-masking a path that holds `@` is the accepted cost.

/// Query parameters whose values are credentials.
const SECRET_PARAMS: &[&str] = &[
    "password",
    "sslpassword",
    "pass",
    "token",
    "access_token",
    "api_key",
    "apikey",
    "secret",
];

/// `url` with the password of its userinfo and the values of credential query parameters replaced
/// by `***`. The user name stays (it is not a secret and says which role connects).
#[must_use]
pub fn mask_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return mask_query(url);
    };
    let start = scheme_end + 3;
    let rest = &url[start..];
    // Everything up to the last `@` is userinfo, even when it holds `/`, `?` or `#`: a password may.
    let masked_rest = match rest.rfind('@') {
        Some(at) => {
            let (userinfo, after) = (&rest[..at], &rest[at..]);
            let user = match userinfo.find(':') {
                Some(colon) => format!("{}:***", &userinfo[..colon]),
                None => userinfo.to_owned(),
            };
            format!("{user}{}", mask_query(after))
        }
        None => mask_query(rest),
    };
    format!("{}{masked_rest}", &url[..start])
}

/// The query of `s` (after its first `?`) with credential values masked.
fn mask_query(s: &str) -> String {
    let Some(q) = s.find('?') else {
        return s.to_owned();
    };
    let (base, query) = s.split_at(q + 1);
    let (query, fragment) = match query.find('#') {
        Some(h) => query.split_at(h),
        None => (query, ""),
    };
    let masked: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _))
                if SECRET_PARAMS
                    .iter()
                    .any(|p| p.eq_ignore_ascii_case(k.trim())) =>
            {
                format!("{k}=***")
            }
            _ => kv.to_owned(),
        })
        .collect();
    format!("{base}{}{fragment}", masked.join("&"))
}

#[cfg(test)]
mod tests {
    use super::mask_url;

    #[test]
    fn s2_url_credentials_are_masked_even_when_the_password_holds_slash_or_at() {
        for (url, want) in [
            (
                "postgres://bridge:s3cret@db:5432/cb",
                "postgres://bridge:***@db:5432/cb",
            ),
            ("postgres://bridge@db/cb", "postgres://bridge@db/cb"),
            (
                "postgres://db/cb?user=x&password=s3cret",
                "postgres://db/cb?user=x&password=***",
            ),
            ("sqlite://./chat-bridge.db", "sqlite://./chat-bridge.db"),
            ("sqlite:cb.db?mode=rwc", "sqlite:cb.db?mode=rwc"),
            ("postgres://u:p%40ss@h/d", "postgres://u:***@h/d"),
            // Unescaped `/` in the password: the first `/` is not the end of the authority.
            ("postgres://u:pa/ss@h:5432/d", "postgres://u:***@h:5432/d"),
            ("postgres://u:a/b/c@h/d", "postgres://u:***@h/d"),
            // Unescaped `@`, `?` and `#` in the password.
            ("postgres://u:p@ss@h/d", "postgres://u:***@h/d"),
            ("postgresql://u:p?w#d@h/d", "postgresql://u:***@h/d"),
            (
                "wss://agent:tok/en@daemon:4000/acp",
                "wss://agent:***@daemon:4000/acp",
            ),
            (
                "ws://daemon:4000/acp?token=abc&x=1",
                "ws://daemon:4000/acp?token=***&x=1",
            ),
            (
                "postgres://h/d?sslpassword=k&PASSWORD=p",
                "postgres://h/d?sslpassword=***&PASSWORD=***",
            ),
            ("ws://127.0.0.1:7070/acp", "ws://127.0.0.1:7070/acp"),
            ("not a url", "not a url"),
            ("", ""),
        ] {
            assert_eq!(mask_url(url), want, "{url}");
        }
    }

    #[test]
    fn s2_masking_never_leaves_a_password_byte_behind() {
        for password in ["hunter2", "a/b", "a@b", "/@/@", "p?q#r", "x:y", "%2F%40"] {
            let url = format!("postgres://bridge:{password}@db.example:5432/chat?sslmode=require");
            let masked = mask_url(&url);
            assert_eq!(
                masked, "postgres://bridge:***@db.example:5432/chat?sslmode=require",
                "{url}"
            );
        }
    }

    #[tokio::test]
    async fn s2_connect_errors_name_the_daemon_url_with_its_password_masked() {
        for url in [
            "ws://agent:hunter2@127.0.0.1:1/acp",
            "http://agent:hunter2@127.0.0.1:1/acp",
            "ws://agent:hun/ter2@127.0.0.1:1/acp",
        ] {
            let err = crate::transport::connect(url, None, 1024, std::time::Duration::from_secs(2))
                .await
                .expect_err("nothing listens there");
            let text = err.to_string();
            assert!(
                !text.contains("hunter2")
                    && !text.contains("hun/ter2")
                    && text.contains("agent:***@"),
                "{text}"
            );
        }
    }
}
