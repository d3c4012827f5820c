//! Downloading the files people attach, from the platform's own file hosts only (SSRF: an address
//! a message carries is fetched only when its origin is one the platform serves files from, and a
//! redirect elsewhere is not followed), never more than a cap (counted while reading, whatever the
//! platform announced).

use std::time::Duration;

use super::FetchError;

/// Origins (`scheme://host[:port]`) files may come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origins(Vec<String>);

impl Origins {
    /// The fixed `hosts` (served over HTTPS) plus the origin of `base`, the platform API address in
    /// use (where a proxy or a test double serves files too).
    #[must_use]
    pub fn new(hosts: &[&str], base: &str) -> Self {
        let mut v: Vec<String> = hosts.iter().map(|h| format!("https://{h}")).collect();
        if let Some(o) = origin(base) {
            v.push(o);
        }
        Self(v)
    }

    /// Whether `url` is on one of these origins.
    #[must_use]
    pub fn allow(&self, url: &str) -> bool {
        origin(url).is_some_and(|o| self.0.contains(&o))
    }
}

fn origin(url: &str) -> Option<String> {
    let u = reqwest::Url::parse(url).ok()?;
    if !matches!(u.scheme(), "http" | "https") || !u.username().is_empty() || u.password().is_some()
    {
        return None;
    }
    let host = u.host_str()?.to_ascii_lowercase();
    Some(match u.port() {
        Some(p) => format!("{}://{host}:{p}", u.scheme()),
        None => format!("{}://{host}", u.scheme()),
    })
}

/// An HTTP client that follows redirects only within `origins`.
///
/// # Errors
/// When the client cannot be built.
pub fn client(origins: &Origins) -> Result<reqwest::Client, FetchError> {
    daemon_client::install_crypto_provider();
    let allowed = origins.clone();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .redirect(reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() < 5 && allowed.allow(attempt.url().as_str()) {
                attempt.follow()
            } else {
                attempt.stop()
            }
        }))
        .build()
        .map_err(|e| FetchError::Failed(e.without_url().to_string()))
}

/// GETs `url` (on `origins` only) with `bearer` if given; at most `max` bytes.
///
/// # Errors
/// [`FetchError::ForeignHost`] for any other address; [`FetchError::TooLarge`] past `max`;
/// [`FetchError::Failed`] otherwise (an HTML page where a file was expected means the token may
/// not read files).
pub async fn get(
    http: &reqwest::Client,
    origins: &Origins,
    url: &str,
    bearer: Option<&str>,
    max: u64,
) -> Result<Vec<u8>, FetchError> {
    if !origins.allow(url) {
        return Err(FetchError::ForeignHost);
    }
    let mut req = http.get(url);
    if let Some(token) = bearer {
        req = req.bearer_auth(token);
    }
    let mut resp = req
        .send()
        .await
        .map_err(|e| FetchError::Failed(e.without_url().to_string()))?;
    let status = resp.status();
    if status.is_redirection() {
        return Err(FetchError::ForeignHost);
    }
    if !status.is_success() {
        return Err(FetchError::Failed(format!("HTTP {}", status.as_u16())));
    }
    if resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/html"))
    {
        return Err(FetchError::Failed(
            "the platform answered with a web page: the bot may lack the permission to read files"
                .into(),
        ));
    }
    if resp.content_length().is_some_and(|n| n > max) {
        return Err(FetchError::TooLarge(max));
    }
    let mut out = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| FetchError::Failed(e.without_url().to_string()))?
    {
        if (out.len() + chunk.len()) as u64 > max {
            return Err(FetchError::TooLarge(max));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssrf_only_the_platforms_file_origins_are_allowed() {
        let o = Origins::new(&["files.slack.com"], "http://127.0.0.1:4000/api");
        assert!(o.allow("https://files.slack.com/files-pri/T1-F1/download/a.png"));
        assert!(o.allow("http://127.0.0.1:4000/files/F1"));
        for bad in [
            "http://files.slack.com/a.png",
            "https://files.slack.com.evil.example/a.png",
            "https://evil.example/?https://files.slack.com/",
            "http://127.0.0.1:4001/files/F1",
            "http://169.254.169.254/latest/meta-data/",
            "https://user:pw@files.slack.com/a.png",
            "file:///etc/passwd",
            "not a url",
        ] {
            assert!(!o.allow(bad), "{bad}");
        }
    }
}
