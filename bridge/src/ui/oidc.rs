//! Single sign-on for the history pages (`[http.ui_oidc]`): the OpenID Connect authorization code
//! flow with PKCE (S256). `/ui/oidc/start` sends the browser to the provider with a fresh `state`,
//! `nonce` and code challenge, kept in a short-lived signed cookie (nothing stored, any replica can
//! finish the sign-in); `/ui/oidc/callback` checks `state`, redeems the code at the token
//! endpoint, verifies the ID token's signature against the provider's JWKS (RS256, ES256) and its
//! `iss`, `aud`, `azp`, `exp` and `nonce`, then lets the person in only when an allow rule names
//! their email, their email's domain (when the provider says it is verified) or one of their
//! groups. The provider's discovery document and keys are cached for `cache_for` (default 15
//! minutes); an ID token signed by a key the cached set does not name (the provider rotated its
//! keys) makes the bridge fetch the keys again once before it decides.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::config::UiOidc;
use crate::core::lock;
use tokio::time::Instant;

/// The cookie holding a sign-in in progress.
pub const PENDING_COOKIE: &str = "chat_bridge_oidc";
/// The callback's path under the UI.
pub const CALLBACK_PATH: &str = "/ui/oidc/callback";
/// How long a sign-in in progress may take, ms.
pub const PENDING_TTL_MS: i64 = 10 * 60_000;
/// Clock skew allowed on `exp` and `iat`, seconds.
const LEEWAY_S: i64 = 60;

/// The provider's endpoints, from its discovery document.
#[derive(Debug, Clone, Deserialize)]
pub struct Discovery {
    /// Must equal the configured issuer.
    pub issuer: String,
    /// Where the browser is sent.
    pub authorization_endpoint: String,
    /// Where the code is redeemed.
    pub token_endpoint: String,
    /// The signing keys.
    pub jwks_uri: String,
}

/// What the ID token says about the person (after every check).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// `sub`.
    pub subject: String,
    /// `email`, if any.
    pub email: Option<String>,
    /// `email_verified` (absent counts as verified only for `allowed_emails`, never for domains).
    pub email_verified: bool,
    /// `groups`, if any.
    pub groups: Vec<String>,
}

impl Identity {
    /// The name shown on the pages and in the log.
    #[must_use]
    pub fn display(&self) -> String {
        self.email.clone().unwrap_or_else(|| self.subject.clone())
    }
}

/// Why a sign-in failed: said to the person in general words; the detail goes to the log.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    /// The provider could not be reached or answered nonsense.
    #[error("the identity provider: {0}")]
    Provider(String),
    /// The ID token failed a check.
    #[error("the ID token was refused: {0}")]
    Token(String),
    /// The flow was not one we started (state, cookie).
    #[error("this sign-in was not started here or has expired: {0}")]
    Flow(String),
}

/// A document fetched from the provider and when.
#[derive(Debug)]
struct Cached<T> {
    value: Arc<T>,
    at: Instant,
}

/// The provider's documents, each kept for `ttl`. The lock is held only to read or replace an
/// entry, never across a fetch (two sign-ins at once may both fetch; either result is right).
#[derive(Debug)]
struct Cache {
    ttl: Duration,
    discovery: Mutex<Option<Cached<Discovery>>>,
    jwks: Mutex<Option<Cached<Value>>>,
}

impl Cache {
    fn fresh<T>(&self, slot: &Mutex<Option<Cached<T>>>) -> Option<Arc<T>> {
        lock(slot)
            .as_ref()
            .filter(|c| c.at.elapsed() < self.ttl)
            .map(|c| c.value.clone())
    }

    fn keep<T>(&self, slot: &Mutex<Option<Cached<T>>>, value: T) -> Arc<T> {
        let value = Arc::new(value);
        *lock(slot) = Some(Cached {
            value: value.clone(),
            at: Instant::now(),
        });
        value
    }
}

/// The OpenID Connect client.
pub struct Oidc {
    cfg: UiOidc,
    issuer: String,
    secret: SecretString,
    redirect_url: String,
    http: reqwest::Client,
    cache: Cache,
}

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc")
            .field("issuer", &self.issuer)
            .field("client_id", &self.cfg.client_id)
            .field("redirect_url", &self.redirect_url)
            .finish_non_exhaustive()
    }
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn random_token() -> String {
    b64(&rand::random::<[u8; 32]>())
}

/// PKCE S256: `BASE64URL(SHA256(verifier))`.
#[must_use]
pub fn code_challenge(verifier: &str) -> String {
    b64(&Sha256::digest(verifier.as_bytes()))
}

/// A sign-in in progress: what the callback must find again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// `state`.
    pub state: String,
    /// `nonce`.
    pub nonce: String,
    /// The PKCE code verifier.
    pub verifier: String,
}

impl Pending {
    /// Fresh random values.
    #[must_use]
    pub fn new() -> Self {
        Self {
            state: random_token(),
            nonce: random_token(),
            verifier: random_token(),
        }
    }

    /// `state.nonce.verifier` (each is base64url: no dots).
    #[must_use]
    pub fn encode(&self) -> String {
        format!("{}.{}.{}", self.state, self.nonce, self.verifier)
    }

    /// The inverse of [`Pending::encode`].
    #[must_use]
    pub fn decode(s: &str) -> Option<Self> {
        let mut it = s.split('.');
        let (state, nonce, verifier) = (it.next()?, it.next()?, it.next()?);
        if it.next().is_some() || [state, nonce, verifier].iter().any(|v| v.is_empty()) {
            return None;
        }
        Some(Self {
            state: state.to_owned(),
            nonce: nonce.to_owned(),
            verifier: verifier.to_owned(),
        })
    }
}

impl Default for Pending {
    fn default() -> Self {
        Self::new()
    }
}

impl Oidc {
    /// The client for `cfg` (checked by the configuration: issuer, client id, secret, a redirect
    /// URL or `ui_url`, an allow rule).
    ///
    /// # Errors
    /// Something the configuration check refuses first.
    pub fn new(
        cfg: &UiOidc,
        secret: Option<&SecretString>,
        ui_url: Option<&str>,
    ) -> anyhow::Result<Self> {
        let secret = crate::config::required(secret, "CHAT_BRIDGE_HTTP__UI_OIDC_CLIENT_SECRET")?;
        let redirect_url = match (&cfg.redirect_url, ui_url) {
            (Some(u), _) => u.trim().to_owned(),
            (None, Some(base)) => format!("{}{CALLBACK_PATH}", base.trim_end_matches('/')),
            (None, None) => anyhow::bail!("[http.ui_oidc] needs redirect_url or http.ui_url"),
        };
        daemon_client::install_crypto_provider();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(std::time::Duration::from_secs(10))
            .build()?;
        Ok(Self {
            cfg: cfg.clone(),
            issuer: cfg.issuer.trim().trim_end_matches('/').to_owned(),
            secret: secret.clone(),
            redirect_url,
            http,
            cache: Cache {
                ttl: cfg.cache_for,
                discovery: Mutex::new(None),
                jwks: Mutex::new(None),
            },
        })
    }

    async fn get_json(&self, url: &str) -> Result<Value, OidcError> {
        let r = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| OidcError::Provider(format!("{url}: {}", e.without_url())))?;
        if !r.status().is_success() {
            return Err(OidcError::Provider(format!("{url}: HTTP {}", r.status())));
        }
        r.json()
            .await
            .map_err(|e| OidcError::Provider(format!("{url}: not JSON: {}", e.without_url())))
    }

    /// The discovery document, whose `issuer` must be the configured one: cached, else fetched.
    ///
    /// # Errors
    /// Unreachable, not JSON, or another issuer.
    pub async fn discover(&self) -> Result<Arc<Discovery>, OidcError> {
        if let Some(d) = self.cache.fresh(&self.cache.discovery) {
            return Ok(d);
        }
        let d = self.fetch_discovery().await?;
        Ok(self.cache.keep(&self.cache.discovery, d))
    }

    /// The provider's keys: cached, else (or when `refresh`) fetched.
    async fn keys(&self, d: &Discovery, refresh: bool) -> Result<Arc<Value>, OidcError> {
        if !refresh && let Some(k) = self.cache.fresh(&self.cache.jwks) {
            return Ok(k);
        }
        let k = self.get_json(&d.jwks_uri).await?;
        Ok(self.cache.keep(&self.cache.jwks, k))
    }

    async fn fetch_discovery(&self) -> Result<Discovery, OidcError> {
        let url = format!("{}/.well-known/openid-configuration", self.issuer);
        let d: Discovery = serde_json::from_value(self.get_json(&url).await?)
            .map_err(|e| OidcError::Provider(format!("discovery document: {e}")))?;
        if d.issuer.trim_end_matches('/') != self.issuer {
            return Err(OidcError::Provider(format!(
                "the discovery document names issuer {:?}, not the configured {:?}",
                d.issuer, self.issuer
            )));
        }
        Ok(d)
    }

    /// Where to send the browser for `pending`.
    #[must_use]
    pub fn authorize_url(&self, d: &Discovery, pending: &Pending) -> String {
        let scope = if self.cfg.allowed_groups.is_empty() {
            "openid email profile"
        } else {
            "openid email profile groups"
        };
        let challenge = code_challenge(&pending.verifier);
        let query = serde_urlencoded::to_string([
            ("response_type", "code"),
            ("client_id", self.cfg.client_id.as_str()),
            ("redirect_uri", self.redirect_url.as_str()),
            ("scope", scope),
            ("state", pending.state.as_str()),
            ("nonce", pending.nonce.as_str()),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
        ])
        .unwrap_or_default();
        let sep = if d.authorization_endpoint.contains('?') {
            '&'
        } else {
            '?'
        };
        format!("{}{sep}{query}", d.authorization_endpoint)
    }

    /// Redeems `code`, verifies the ID token and applies the allow rules.
    ///
    /// # Errors
    /// The provider's failure, a refused token, or a person no rule lets in.
    pub async fn finish(
        &self,
        code: &str,
        pending: &Pending,
        now_s: i64,
    ) -> Result<Identity, OidcError> {
        let d = self.discover().await?;
        let form = serde_urlencoded::to_string([
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", self.redirect_url.as_str()),
            ("client_id", self.cfg.client_id.as_str()),
            ("client_secret", self.secret.expose_secret()),
            ("code_verifier", pending.verifier.as_str()),
        ])
        .map_err(|e| OidcError::Flow(e.to_string()))?;
        let r = self
            .http
            .post(&d.token_endpoint)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .body(form)
            .send()
            .await
            .map_err(|e| OidcError::Provider(format!("token endpoint: {}", e.without_url())))?;
        let status = r.status();
        let body: Value = r.json().await.map_err(|e| {
            OidcError::Provider(format!("token endpoint: not JSON: {}", e.without_url()))
        })?;
        if !status.is_success() {
            // The provider's error code only: its description may echo what was sent.
            return Err(OidcError::Provider(format!(
                "token endpoint: HTTP {status} {}",
                body["error"].as_str().unwrap_or("")
            )));
        }
        let id_token = body["id_token"]
            .as_str()
            .ok_or_else(|| OidcError::Provider("the token answer has no id_token".into()))?;
        let mut jwks = self.keys(&d, false).await?;
        if let Some(kid) = token_kid(id_token)
            && !names_kid(&jwks, &kid)
        {
            // A key the cached set does not name: the provider may have rotated its keys.
            tracing::info!(kid = %kid, "UI single sign-on: an unknown signing key; fetching the provider's keys again");
            jwks = self.keys(&d, true).await?;
        }
        verify_id_token(
            id_token,
            &jwks,
            &d.issuer,
            &self.cfg.client_id,
            &pending.nonce,
            now_s,
        )
    }

    /// Whether an allow rule lets `who` in.
    #[must_use]
    pub fn allows(&self, who: &Identity) -> bool {
        allowed(&self.cfg, who)
    }
}

/// The allow rules: an email listed; a verified email in a listed domain; a listed group.
#[must_use]
pub fn allowed(cfg: &UiOidc, who: &Identity) -> bool {
    let norm = |s: &str| s.trim().to_lowercase();
    let email = who.email.as_deref().map(norm).filter(|e| !e.is_empty());
    let by_email = email.as_deref().is_some_and(|e| {
        cfg.allowed_emails
            .iter()
            .any(|a| !a.trim().is_empty() && norm(a) == e)
    });
    let by_domain = who.email_verified
        && email
            .as_deref()
            .and_then(|e| e.rsplit_once('@'))
            .is_some_and(|(local, d)| {
                !local.is_empty()
                    && cfg.allowed_domains.iter().any(|a| {
                        let a = norm(a);
                        let a = a.trim_start_matches('@');
                        !a.is_empty() && a == d
                    })
            });
    let by_group = who.groups.iter().any(|g| {
        cfg.allowed_groups
            .iter()
            .any(|a| !a.trim().is_empty() && a.trim() == g)
    });
    by_email || by_domain || by_group
}

/// The `kid` of a compact JWS's header, when it names one.
fn token_kid(token: &str) -> Option<String> {
    let header = URL_SAFE_NO_PAD
        .decode(token.split('.').next()?.trim_end_matches('='))
        .ok()?;
    let header: Value = serde_json::from_slice(&header).ok()?;
    let kid = header["kid"].as_str()?;
    // Its own alphabet only, and short: it goes to the log.
    (kid.len() <= 200
        && kid
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.=+/".contains(c)))
    .then(|| kid.to_owned())
}

/// Whether `jwks` holds a key named `kid`.
fn names_kid(jwks: &Value, kid: &str) -> bool {
    jwks["keys"]
        .as_array()
        .is_some_and(|keys| keys.iter().any(|k| k["kid"].as_str() == Some(kid)))
}

fn part(s: &str, what: &str) -> Result<Vec<u8>, OidcError> {
    URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .map_err(|_| OidcError::Token(format!("its {what} is not base64url")))
}

fn jwk_bytes(k: &Value, field: &str) -> Result<Vec<u8>, OidcError> {
    let s = k[field]
        .as_str()
        .ok_or_else(|| OidcError::Token(format!("the signing key has no {field}")))?;
    part(s, "key")
}

/// Verifies a compact JWS ID token against `jwks` (RS256 or ES256; `none`, HMAC and anything else
/// refused) and checks `iss`, `aud`, `azp`, `exp`, `iat` and `nonce`.
///
/// # Errors
/// The first check that fails, in words that carry no part of the token.
pub fn verify_id_token(
    token: &str,
    jwks: &Value,
    issuer: &str,
    client_id: &str,
    nonce: &str,
    now_s: i64,
) -> Result<Identity, OidcError> {
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(OidcError::Token("not a signed JWT (three parts)".into()));
    };
    let header: Value = serde_json::from_slice(&part(h, "header")?)
        .map_err(|_| OidcError::Token("its header is not JSON".into()))?;
    let sig = part(s, "signature")?;
    let alg = header["alg"].as_str().unwrap_or("");
    let (kty, ring_alg): (&str, &'static dyn ring::signature::VerificationAlgorithm) = match alg {
        "RS256" => ("RSA", &ring::signature::RSA_PKCS1_2048_8192_SHA256),
        "ES256" => ("EC", &ring::signature::ECDSA_P256_SHA256_FIXED),
        other => {
            return Err(OidcError::Token(format!(
                "algorithm {other:?} is not accepted (RS256, ES256)"
            )));
        }
    };
    let kid = header["kid"].as_str();
    let keys = jwks["keys"].as_array().map_or(&[][..], Vec::as_slice);
    let candidates: Vec<&Value> = keys
        .iter()
        .filter(|k| k["kty"] == kty)
        .filter(|k| k["use"].as_str().is_none_or(|u| u == "sig"))
        .filter(|k| k["alg"].as_str().is_none_or(|a| a == alg))
        .filter(|k| kid.is_none_or(|kid| k["kid"].as_str() == Some(kid)))
        .collect();
    if candidates.is_empty() {
        return Err(OidcError::Token(
            "no key of the provider's matches it".into(),
        ));
    }
    let signed = &token.as_bytes()[..h.len() + 1 + p.len()];
    let verified = candidates.iter().any(|k| {
        let key = match kty {
            "RSA" => match (jwk_bytes(k, "n"), jwk_bytes(k, "e")) {
                (Ok(n), Ok(e)) => {
                    return ring::signature::RsaPublicKeyComponents { n, e }
                        .verify(&ring::signature::RSA_PKCS1_2048_8192_SHA256, signed, &sig)
                        .is_ok();
                }
                _ => return false,
            },
            _ => match (jwk_bytes(k, "x"), jwk_bytes(k, "y")) {
                (Ok(x), Ok(y)) if k["crv"] == "P-256" && x.len() == 32 && y.len() == 32 => {
                    [&[4u8][..], &x, &y].concat()
                }
                _ => return false,
            },
        };
        ring::signature::UnparsedPublicKey::new(ring_alg, key)
            .verify(signed, &sig)
            .is_ok()
    });
    if !verified {
        return Err(OidcError::Token("its signature does not verify".into()));
    }
    let claims: Value = serde_json::from_slice(&part(p, "payload")?)
        .map_err(|_| OidcError::Token("its payload is not JSON".into()))?;
    if claims["iss"].as_str().map(|i| i.trim_end_matches('/')) != Some(issuer.trim_end_matches('/'))
    {
        return Err(OidcError::Token("another issuer signed it".into()));
    }
    let aud_ok = match &claims["aud"] {
        Value::String(a) => a == client_id,
        Value::Array(a) => a.iter().any(|a| a == client_id),
        _ => false,
    };
    if !aud_ok {
        return Err(OidcError::Token("it is not for this client (aud)".into()));
    }
    if let Some(azp) = claims["azp"].as_str()
        && azp != client_id
    {
        return Err(OidcError::Token(
            "it was issued to another party (azp)".into(),
        ));
    }
    let exp = claims["exp"]
        .as_i64()
        .ok_or_else(|| OidcError::Token("it has no exp".into()))?;
    if now_s > exp.saturating_add(LEEWAY_S) {
        return Err(OidcError::Token("it has expired".into()));
    }
    if claims["iat"]
        .as_i64()
        .is_some_and(|iat| iat > now_s.saturating_add(LEEWAY_S))
    {
        return Err(OidcError::Token("it was issued in the future (iat)".into()));
    }
    let given = claims["nonce"].as_str().unwrap_or("");
    if nonce.is_empty() || !shell_agent::auth::tokens_match(given, nonce) {
        return Err(OidcError::Token("its nonce is not this sign-in's".into()));
    }
    let subject = claims["sub"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| OidcError::Token("it has no sub".into()))?
        .to_owned();
    Ok(Identity {
        subject,
        email: claims["email"].as_str().map(str::to_owned),
        email_verified: claims["email_verified"].as_bool() == Some(true)
            || claims["email_verified"].as_str() == Some("true"),
        groups: claims["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|g| g.as_str().map(str::to_owned))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use ring::rand::SystemRandom;
    use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
    use serde_json::json;

    use super::*;

    struct Signer {
        key: EcdsaKeyPair,
        rng: SystemRandom,
    }

    impl Signer {
        fn new() -> Self {
            let rng = SystemRandom::new();
            let pkcs8 =
                EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("key");
            let key =
                EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
                    .expect("key");
            Self { key, rng }
        }

        fn jwks(&self) -> Value {
            let pk = self.key.public_key().as_ref();
            json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1", "use": "sig",
                "x": b64(&pk[1..33]), "y": b64(&pk[33..65])}]})
        }

        fn sign(&self, header: &Value, claims: &Value) -> String {
            let input = format!(
                "{}.{}",
                b64(header.to_string().as_bytes()),
                b64(claims.to_string().as_bytes())
            );
            let sig = self.key.sign(&self.rng, input.as_bytes()).expect("sign");
            format!("{input}.{}", b64(sig.as_ref()))
        }
    }

    const ISS: &str = "https://idp.example";
    const NOW: i64 = 1_800_000_000;

    fn claims() -> Value {
        json!({"iss": ISS, "aud": "bridge", "sub": "u1", "exp": NOW + 600, "iat": NOW,
            "nonce": "n-1", "email": "ann@example.com", "email_verified": true, "groups": ["ops"]})
    }

    fn header() -> Value {
        json!({"alg": "ES256", "kid": "k1", "typ": "JWT"})
    }

    #[test]
    fn s_oidc2_a_well_signed_token_for_this_client_and_nonce_is_accepted() {
        let s = Signer::new();
        let t = s.sign(&header(), &claims());
        let who = verify_id_token(&t, &s.jwks(), ISS, "bridge", "n-1", NOW).expect("valid");
        assert_eq!(who.email.as_deref(), Some("ann@example.com"));
        assert!(who.email_verified);
        assert_eq!(who.groups, ["ops"]);
    }

    #[test]
    fn s_oidc2_tampered_resigned_foreign_or_stale_tokens_are_refused() {
        let s = Signer::new();
        let jwks = s.jwks();
        let ok = |t: &str| verify_id_token(t, &jwks, ISS, "bridge", "n-1", NOW);
        // The payload changed after signing (another email).
        let t = s.sign(&header(), &claims());
        let mut parts: Vec<String> = t.split('.').map(str::to_owned).collect();
        let mut c = claims();
        c["email"] = json!("mallory@example.com");
        parts[1] = b64(c.to_string().as_bytes());
        assert!(ok(&parts.join(".")).is_err(), "tampered payload");
        // Signed by another key (re-signed by an attacker).
        let other = Signer::new().sign(&header(), &claims());
        assert!(ok(&other).is_err(), "another key");
        // alg none / HS256 are refused whatever follows.
        for alg in ["none", "HS256", "RS512"] {
            let mut h = header();
            h["alg"] = json!(alg);
            assert!(ok(&s.sign(&h, &claims())).is_err(), "{alg}");
        }
        let mut h = header();
        h["kid"] = json!("k2");
        assert!(ok(&s.sign(&h, &claims())).is_err(), "unknown kid");
        for (k, v) in [
            ("iss", json!("https://evil.example")),
            ("aud", json!("another-client")),
            ("aud", json!(["another-client"])),
            ("azp", json!("another-client")),
            ("exp", json!(NOW - 61)),
            ("exp", Value::Null),
            ("iat", json!(NOW + 3600)),
            ("nonce", json!("n-2")),
            ("nonce", Value::Null),
            ("sub", json!("")),
        ] {
            let mut c = claims();
            c[k] = v.clone();
            assert!(ok(&s.sign(&header(), &c)).is_err(), "{k} = {v}");
        }
        for junk in ["", "a.b", "a.b.c.d", "!!.!!.!!"] {
            assert!(ok(junk).is_err(), "{junk}");
        }
        // The expected nonce must be a real one.
        let mut c = claims();
        c["nonce"] = json!("");
        assert!(verify_id_token(&s.sign(&header(), &c), &jwks, ISS, "bridge", "", NOW).is_err());
        // And the unaltered token still passes (the checks above can fail for the right reason).
        assert!(ok(&t).is_ok());
    }

    #[test]
    fn s_oidc1_allow_rules_are_closed_unless_opened() {
        let who = |email: &str, verified: bool, groups: &[&str]| Identity {
            subject: "s".into(),
            email: Some(email.into()),
            email_verified: verified,
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        };
        let cfg = UiOidc {
            allowed_domains: vec!["Example.com".into()],
            allowed_emails: vec!["Bob@Elsewhere.org".into()],
            allowed_groups: vec!["ops".into()],
            ..UiOidc::default()
        };
        assert!(allowed(&cfg, &who("ann@example.com", true, &[])));
        assert!(
            !allowed(&cfg, &who("ann@example.com", false, &[])),
            "unverified"
        );
        assert!(!allowed(&cfg, &who("ann@evilexample.com", true, &[])));
        assert!(!allowed(&cfg, &who("ann@example.com.evil.org", true, &[])));
        assert!(!allowed(&cfg, &who("@example.com", true, &[])));
        assert!(allowed(&cfg, &who("bob@elsewhere.org", false, &[])));
        assert!(allowed(&cfg, &who("eve@elsewhere.org", true, &["ops"])));
        assert!(!allowed(
            &cfg,
            &who("eve@elsewhere.org", true, &["Ops", "dev"])
        ));
        assert!(!allowed(
            &UiOidc::default(),
            &who("ann@example.com", true, &["ops"])
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn s_oidc3_cached_documents_expire_after_cache_for() {
        let cache = Cache {
            ttl: Duration::from_secs(900),
            discovery: Mutex::new(None),
            jwks: Mutex::new(None),
        };
        assert!(cache.fresh(&cache.jwks).is_none(), "nothing fetched yet");
        cache.keep(&cache.jwks, json!({"keys": []}));
        tokio::time::advance(Duration::from_secs(899)).await;
        assert!(cache.fresh(&cache.jwks).is_some());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(
            cache.fresh(&cache.jwks).is_none(),
            "fetched again after cache_for"
        );
        let none = Cache {
            ttl: Duration::ZERO,
            ..cache
        };
        none.keep(&none.jwks, json!({"keys": []}));
        assert!(
            none.fresh(&none.jwks).is_none(),
            "cache_for = 0 fetches every time"
        );
    }

    #[test]
    fn unknown_kids_are_recognised_and_only_well_formed_ones_logged() {
        let jwks = json!({"keys": [{"kid": "k1"}, {"kty": "EC"}]});
        assert!(names_kid(&jwks, "k1"));
        assert!(!names_kid(&jwks, "k2"));
        let token = |h: &Value| format!("{}.e30.sig", b64(h.to_string().as_bytes()));
        assert_eq!(
            token_kid(&token(&json!({"kid": "k2"}))).as_deref(),
            Some("k2")
        );
        assert_eq!(token_kid(&token(&json!({"kid": "a b\n"}))), None);
        assert_eq!(token_kid(&token(&json!({"alg": "RS256"}))), None);
        assert_eq!(token_kid("!!"), None);
    }

    #[test]
    fn pkce_challenge_is_rfc7636_s256_and_pending_round_trips() {
        // RFC 7636 appendix B.
        assert_eq!(
            code_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        let p = Pending::new();
        assert_eq!(Pending::decode(&p.encode()), Some(p.clone()));
        assert_ne!(p, Pending::new());
        for junk in ["", "a.b", "a.b.c.d", "a..c"] {
            assert_eq!(Pending::decode(junk), None, "{junk}");
        }
    }
}
