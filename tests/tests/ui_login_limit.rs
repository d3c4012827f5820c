//! Issue 19: wrong tokens on `/ui/login` are limited per client address — after
//! `http.ui_login_attempts` failures within `http.ui_login_window` the address is refused with 429
//! and a `Retry-After`, even with the right token, until the window has passed; the refusal is
//! logged without the token. In its own test binary: the log capture must not share the process
//! with other tests' threads (tracing caches per-callsite interest process-wide).

use std::sync::Arc;
use std::time::Duration;

use chat_bridge::clock::ManualClock;
use chat_bridge::http::{HttpState, router};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "ui-secret-token-0123";
const WRONG: &str = "guess-7c1e9f-guess";

async fn post_login(http: &reqwest::Client, base: &str, token: &str) -> reqwest::Response {
    http.post(format!("{base}/ui/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(serde_urlencoded::to_string([("token", token)]).expect("form"))
        .send()
        .await
        .expect("login")
}

fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

#[test]
fn s_login1_wrong_tokens_are_limited_per_address_with_429_and_retry_after_and_logged_without_the_token()
 {
    let logs = chat_bridge_tests::logs::logged(tracing::Level::DEBUG, || async {
        daemon_client::install_crypto_provider();
        let dir = tempfile::tempdir().expect("tmp");
        let url = format!("sqlite://{}", dir.path().join("ui.db").display());
        let store = chat_bridge::store::Store::open(&url).await.expect("store");
        let http_cfg = chat_bridge::config::Http {
            ui: true,
            api_token: Some(TOKEN.into()),
            ui_login_attempts: 3,
            ui_login_window: Duration::from_secs(600),
            ..Default::default()
        };
        let ui = chat_bridge::ui::Ui::new(
            &http_cfg,
            chat_bridge::core::redact::Redactor::default(),
            CancellationToken::new(),
        )
        .expect("ui");
        let clock = Arc::new(ManualClock::at(1_800_000_000_000));
        let state = HttpState::new(store.clone(), Arc::default(), Some(TOKEN.into()))
            .with_ui(ui)
            .with_clock(clock.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let service = router(state).into_make_service_with_connect_info::<std::net::SocketAddr>();
        let server = tokio::spawn(async move { axum::serve(listener, service).await });
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client");

        // Three wrong tokens: each a plain 401.
        for _ in 0..3 {
            let r = post_login(&http, &base, WRONG).await;
            assert_eq!(r.status(), 401);
            clock.advance(Duration::from_secs(60));
        }
        // Now refused unchecked — the right token too — until the first failure is 10
        // minutes old (it is 3 minutes old now: 7 minutes to go).
        for token in [WRONG, TOKEN] {
            let r = post_login(&http, &base, token).await;
            assert_eq!(r.status(), 429, "{token}");
            assert_eq!(header(&r, "retry-after"), "420");
            assert!(header(&r, "set-cookie").is_empty());
            let body = r.text().await.expect("body");
            assert!(
                body.contains("Too many wrong tokens from your address; try again in 7 minutes."),
                "{body}"
            );
        }
        // The pages stay closed meanwhile, and other routes are not limited.
        let r = http.get(format!("{base}/ui/")).send().await.expect("list");
        assert_eq!(r.status(), 303);
        assert_eq!(
            http.get(format!("{base}/healthz"))
                .send()
                .await
                .expect("health")
                .status(),
            200
        );
        // When the oldest failure leaves the window, one more try is allowed (the other two
        // still count): the right token gets in, and that forgets the failures.
        clock.advance(Duration::from_secs(420));
        let r = post_login(&http, &base, TOKEN).await;
        assert_eq!(
            (r.status().as_u16(), header(&r, "location")),
            (303, "/ui/".to_owned())
        );
        for _ in 0..2 {
            assert_eq!(post_login(&http, &base, WRONG).await.status(), 401);
        }
        assert_eq!(
            post_login(&http, &base, TOKEN).await.status(),
            303,
            "two failures after a success do not block"
        );
        server.abort();

        // Behind a proxy (`http.ui_client_ip_header`): counted per the address the proxy
        // appended — the last entry — whatever the client wrote before it.
        let http_cfg = chat_bridge::config::Http {
            ui_login_attempts: 2,
            ui_client_ip_header: Some("X-Forwarded-For".into()),
            ..http_cfg
        };
        let ui = chat_bridge::ui::Ui::new(
            &http_cfg,
            chat_bridge::core::redact::Redactor::default(),
            CancellationToken::new(),
        )
        .expect("ui");
        let state = HttpState::new(store.clone(), Arc::default(), Some(TOKEN.into()))
            .with_ui(ui)
            .with_clock(clock.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let service = router(state).into_make_service_with_connect_info::<std::net::SocketAddr>();
        let server = tokio::spawn(async move { axum::serve(listener, service).await });
        let via = |xff: Option<&str>| {
            let mut r = http
                .post(format!("{base}/ui/login"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(serde_urlencoded::to_string([("token", WRONG)]).expect("form"));
            if let Some(x) = xff {
                r = r.header("x-forwarded-for", x);
            }
            r.send()
        };
        for _ in 0..2 {
            assert_eq!(via(Some("203.0.113.7")).await.expect("login").status(), 401);
        }
        assert_eq!(via(Some("203.0.113.7")).await.expect("login").status(), 429);
        assert_eq!(
            via(Some("198.51.100.9, 203.0.113.7"))
                .await
                .expect("login")
                .status(),
            429,
            "a made-up entry before the proxy's does not escape"
        );
        assert_eq!(
            via(Some("203.0.113.7, 198.51.100.1"))
                .await
                .expect("login")
                .status(),
            401,
            "another client behind the same proxy has its own allowance"
        );
        assert_eq!(
            via(None).await.expect("login").status(),
            401,
            "no header: the peer"
        );
        server.abort();
        store.close().await;
    });
    assert!(
        logs.contains("UI sign-in refused: wrong token") && logs.contains("client=127.0.0.1"),
        "{logs}"
    );
    let warned = logs
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("too many wrong tokens"))
        .count();
    assert_eq!(
        warned, 2,
        "the first refusal of a block at warn, later ones at debug: {logs}"
    );
    assert!(logs.contains("retry_after_s=420"), "{logs}");
    assert!(
        logs.contains("client=203.0.113.7") && logs.contains("client=198.51.100.1"),
        "{logs}"
    );
    assert!(
        !logs.contains(WRONG) && !logs.contains(TOKEN),
        "no token in the log: {logs}"
    );
}
