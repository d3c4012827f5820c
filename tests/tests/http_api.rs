//! `/healthz`, `/readyz` and the bearer-protected history API over real HTTP, on both backends; the
//! pointer in a timeout's message (R3) leads to the full output.

use std::sync::Arc;

use chat_bridge::app::Application;
use chat_bridge::channel::{Tone, console};
use chat_bridge_tests::bridge::{config, settle};
use chat_bridge_tests::on_both;
use chat_bridge_tests::recorder::Recorder;
use serde_json::Value;

on_both! {
    async fn http_health_readiness_and_the_history_api_with_auth_and_bad_parameters(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let mut cfg = config(&db.url, dir.path());
        cfg.http.listen = Some("127.0.0.1:0".into());
        cfg.http.api_token = Some("api-secret".into());
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        app.core.accept(console::inbound("timeout=1s echo partial; sleep 30")).await.expect("accept");
        app.core.accept(console::inbound("echo Hello History")).await.expect("accept");
        settle(&app).await;
        daemon_client::install_crypto_provider();
        let base = format!("http://{}", app.http_addr.expect("listening"));
        let http = reqwest::Client::new();
        let get = |path: &str, token: Option<&str>| {
            let mut r = http.get(format!("{base}{path}"));
            if let Some(t) = token {
                r = r.bearer_auth(t);
            }
            r.send()
        };
        let code = |v: &Value| v["error"]["code"].as_str().unwrap_or("").to_owned();

        let r = get("/healthz", None).await.expect("healthz");
        assert_eq!((r.status().as_u16(), r.text().await.expect("body")), (200, "ok".to_owned()));
        let r = get("/readyz", None).await.expect("readyz");
        assert_eq!(r.status(), 200);
        let ready: Value = r.json().await.expect("json");
        assert_eq!((ready["store"].as_bool(), ready["daemon"].as_bool()), (Some(true), Some(true)));
        assert_eq!((ready["role"].as_str(), ready["channel"]["platform"].as_str()), (Some("active"), Some("console")));

        for token in [None, Some("wrong")] {
            let r = get("/api/v1/conversations", token).await.expect("list");
            assert_eq!(r.status(), 401, "{token:?}");
            assert_eq!(code(&r.json().await.expect("json")), "unauthorized");
        }
        let t = Some("api-secret");
        let page: Value = get("/api/v1/conversations", t).await.expect("list").json().await.expect("json");
        let conv = page["items"][0]["id"].as_str().expect("a conversation").to_owned();
        for (path, want) in [("/api/v1/conversations?limit=0", "bad_request"), ("/api/v1/conversations?limit=abc", "bad_request"), ("/api/v1/conversations?cursor=nonsense", "bad_cursor"), ("/api/v1/search", "bad_request"), ("/api/v1/search?q=x&limit=501", "bad_request"), ("/api/v1/dead-letters?limit=0", "bad_request")] {
            let r = get(path, t).await.expect("bad");
            assert_eq!(r.status(), 400, "{path}");
            assert_eq!(code(&r.json().await.expect("json")), want, "{path}");
        }
        let detail: Value = get(&format!("/api/v1/conversations/{conv}"), t).await.expect("detail").json().await.expect("json");
        assert_eq!(detail["tool_calls"].as_array().map(Vec::len), Some(2));
        let r = get("/api/v1/conversations/nope", t).await.expect("404");
        assert_eq!(r.status(), 404);
        assert_eq!(code(&r.json().await.expect("json")), "not_found");

        // R3: the timeout's message points at its full output; the pointer works.
        let timeout = rec.latest().into_iter().map(|(_, m)| m).find(|m| m.tone == Tone::Error).expect("timeout message");
        let footer = timeout.footer.expect("pointer");
        let path = footer.split("GET ").nth(1).expect("an API path").trim().to_owned();
        let call: Value = get(&path, t).await.expect("tool call").json().await.expect("json");
        assert_eq!((call["status"].as_str(), call["output"].as_str()), (Some("timed_out"), Some("partial\n")));

        let r = get("/api/v1/dead-letters", None).await.expect("dead letters");
        assert_eq!(r.status(), 401);
        let dead: Value = get("/api/v1/dead-letters", t).await.expect("dead letters").json().await.expect("json");
        assert_eq!(dead["dead_letters"], serde_json::json!([]), "nothing was refused");
        let hits: Value = get("/api/v1/search?q=hello%20history", t).await.expect("search").json().await.expect("json");
        assert!(hits["hits"].as_array().is_some_and(|h| h.iter().any(|x| x["field"] == "prompt")), "{hits}");
        let r = get("/metrics", None).await.expect("metrics");
        assert_eq!(r.status(), 200);
        let text = r.text().await.expect("body");
        // Every family is registered at 0 from start-up: what happened shows as a count above 0.
        for series in [
            "chatbridge_daemon_events_total{kind=\"tool_progress\"}",
            "chatbridge_tool_results_total{outcome=\"timed_out\"}",
            "chatbridge_deliveries_total{result=\"ok\"}",
        ] {
            let value = text
                .lines()
                .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse::<f64>().ok()))
                .unwrap_or_else(|| panic!("{series} missing from /metrics:\n{text}"));
            assert!(value > 0.0, "{series} was not counted:\n{text}");
        }
        for name in [
            "chatbridge_turn_duration_seconds",
            "chatbridge_chat_api_seconds",
            "chatbridge_outbox_pending",
            "chatbridge_outbox_oldest_pending_age_seconds",
            "chatbridge_daemon_connected 1",
            "chatbridge_heartbeats_total",
            "chatbridge_replica_active",
        ] {
            assert!(text.contains(name), "{name} missing from /metrics:\n{text}");
        }
        assert!(!text.contains("partial") && !text.contains("Hello History"), "no label carries user text or output");

        // The OpenAPI document is served, without a token, and matches the router both ways.
        let r = get("/api/v1/openapi.json", None).await.expect("openapi");
        assert_eq!(r.status(), 200);
        let spec: Value = r.json().await.expect("json");
        assert_eq!(spec["openapi"], "3.1.0");
        let served: Vec<String> = spec["paths"].as_object().expect("paths").keys().cloned().collect();
        let routes = ["/healthz", "/readyz", "/metrics", "/api/v1/openapi.json", "/api/v1/dead-letters", "/api/v1/conversations", "/api/v1/conversations/{id}", "/api/v1/tool-calls/{id}", "/api/v1/search"];
        assert_eq!(served.len(), routes.len(), "{served:?}");
        for route in routes {
            assert!(served.iter().any(|p| p == route), "{route} is not documented");
            let r = get(&route.replace("{id}", "nope").replace("search", "search?q=x"), t).await.expect("documented path");
            if r.status() == 404 {
                assert_eq!(code(&r.json().await.expect("a JSON 404, not a missing route")), "not_found", "{route}");
            } else {
                assert_eq!(r.status(), 200, "{route}");
            }
        }
        app.shutdown().await;
    }
}

/// The history API on its own (SQLite, no daemon): what answers before and after the token check.
#[tokio::test]
async fn s1_bearer_scheme_is_case_insensitive_and_unknown_api_paths_are_401() {
    use chat_bridge::http::{HttpState, router};
    daemon_client::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tmp");
    let url = format!("sqlite://{}", dir.path().join("api.db").display());
    let store = chat_bridge::store::Store::open(&url).await.expect("store");
    let state = HttpState::new(store, Arc::default(), Some("api-secret-0123".into()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let server = tokio::spawn(async move { axum::serve(listener, router(state)).await });
    let http = reqwest::Client::new();
    let send = |method: reqwest::Method, path: &str, auth: Option<&str>| {
        let mut r = http.request(method, format!("{base}{path}"));
        if let Some(a) = auth {
            r = r.header("authorization", a);
        }
        r.send()
    };
    let get = reqwest::Method::GET;
    // Every spelling of the scheme is the same scheme (RFC 7235).
    for auth in [
        "Bearer api-secret-0123",
        "bearer api-secret-0123",
        "BEARER api-secret-0123",
        "bEaReR  api-secret-0123",
    ] {
        let r = send(get.clone(), "/api/v1/conversations", Some(auth))
            .await
            .expect("list");
        assert_eq!(r.status(), 200, "{auth}");
    }
    // Wrong, shorter, longer, other scheme, none: 401 with the JSON shape and a challenge.
    for auth in [
        None,
        Some("Bearer api-secret-012"),
        Some("Bearer api-secret-01234"),
        Some("Basic api-secret-0123"),
        Some("Bearer "),
        Some("api-secret-0123"),
    ] {
        let r = send(get.clone(), "/api/v1/conversations", auth)
            .await
            .expect("list");
        assert_eq!(r.status(), 401, "{auth:?}");
        assert_eq!(
            r.headers()
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok()),
            Some("Bearer")
        );
        let body: Value = r.json().await.expect("a JSON error");
        assert_eq!(body["error"]["code"], "unauthorized", "{auth:?}");
    }
    // Nothing under /api answers before the token: unknown paths and wrong methods are 401 too.
    for (method, path) in [
        (get.clone(), "/api/v2/nope"),
        (get.clone(), "/api/v1/nope"),
        (get.clone(), "/api"),
        (get.clone(), "/api/"),
        (reqwest::Method::POST, "/api/v1/conversations"),
        (reqwest::Method::DELETE, "/api/v1/tool-calls/x"),
    ] {
        let r = send(method.clone(), path, None).await.expect("request");
        assert_eq!(r.status(), 401, "{method} {path}");
        let body: Value = r.json().await.expect("a JSON error");
        assert_eq!(body["error"]["code"], "unauthorized", "{method} {path}");
    }
    // With the token, the same requests get the JSON error shape, never an empty or text body.
    let t = Some("Bearer api-secret-0123");
    for (method, path, status, code) in [
        (get.clone(), "/api/v2/nope", 404, "not_found"),
        (get.clone(), "/api/v1/nope", 404, "not_found"),
        (
            reqwest::Method::POST,
            "/api/v1/conversations",
            405,
            "method_not_allowed",
        ),
        (get.clone(), "/api/v1/tool-calls/%FF", 400, "bad_request"),
    ] {
        let r = send(method.clone(), path, t).await.expect("request");
        assert_eq!(r.status(), status, "{method} {path}");
        let body: Value = r.json().await.expect("a JSON error");
        assert_eq!(body["error"]["code"], code, "{method} {path}");
    }
    // The public contract stays public; health stays unauthenticated.
    assert_eq!(
        send(get.clone(), "/api/v1/openapi.json", None)
            .await
            .expect("openapi")
            .status(),
        200
    );
    assert_eq!(
        send(get.clone(), "/healthz", None)
            .await
            .expect("healthz")
            .status(),
        200
    );
    server.abort();
}

/// Issue 17: `GET /api/v1/conversations?project=` lists one project's conversations, each item
/// naming its project; the one-project configuration's are in `default`.
#[tokio::test]
async fn issue17_the_api_filters_conversations_by_project() {
    use chat_bridge::http::{HttpState, router};
    use chat_bridge::store::conversations::{self, Key};
    daemon_client::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tmp");
    let url = format!("sqlite://{}", dir.path().join("api.db").display());
    let store = chat_bridge::store::Store::open(&url).await.expect("store");
    let mut ids = Vec::new();
    {
        let mut c = store.conn().await.expect("conn");
        for (i, project) in ["api", "web", "default"].iter().enumerate() {
            let thread = i.to_string();
            let k = Key {
                platform: "discord",
                workspace: "G",
                channel: "98765",
                thread: &thread,
            };
            let (conv, _) =
                conversations::find_or_create_in(&mut c, &k, project, "U1", "t", 1000 + i as i64)
                    .await
                    .expect("conv");
            ids.push(conv.id);
        }
    }
    let state = HttpState::new(store, Arc::default(), Some("api-secret-0123".into()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let server = tokio::spawn(async move { axum::serve(listener, router(state)).await });
    let http = reqwest::Client::new();
    let list = |query: &str| {
        let r = http
            .get(format!("{base}/api/v1/conversations{query}"))
            .header("authorization", "Bearer api-secret-0123")
            .send();
        async move {
            let r = r.await.expect("list");
            assert_eq!(r.status(), 200);
            let page: Value = r.json().await.expect("json");
            page["items"]
                .as_array()
                .expect("items")
                .iter()
                .map(|i| {
                    (
                        i["id"].as_str().expect("id").to_owned(),
                        i["project"].as_str().expect("project").to_owned(),
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        list("?project=api").await,
        [(ids[0].clone(), "api".to_owned())]
    );
    assert_eq!(
        list("?project=web&platform=discord").await,
        [(ids[1].clone(), "web".to_owned())]
    );
    assert_eq!(
        list("?project=default").await,
        [(ids[2].clone(), "default".to_owned())]
    );
    assert!(list("?project=nope").await.is_empty());
    assert_eq!(list("").await.len(), 3, "no filter: every project");
    server.abort();
}

/// S-LOGIN1 on the API: wrong bearer tokens count per client address with the UI's limiter — after
/// `http.ui_login_attempts` the address gets 429 with `Retry-After`, the right token too, until the
/// oldest failure leaves the window; a wrong token on `/ui/login` counts against the API as well.
#[tokio::test]
async fn s_login1_wrong_api_bearer_tokens_are_limited_per_address_like_the_ui() {
    use chat_bridge::clock::ManualClock;
    use chat_bridge::http::{HttpState, router};
    use std::time::Duration;
    daemon_client::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tmp");
    let url = format!("sqlite://{}", dir.path().join("api.db").display());
    let store = chat_bridge::store::Store::open(&url).await.expect("store");
    let http_cfg = chat_bridge::config::Http {
        api_token: Some("api-secret-0123".into()),
        ui_login_attempts: 3,
        ui_login_window: Duration::from_secs(600),
        ..Default::default()
    };
    let clock = Arc::new(ManualClock::at(1_800_000_000_000));
    let serve = |state: HttpState| async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let service = router(state).into_make_service_with_connect_info::<std::net::SocketAddr>();
        (
            base,
            tokio::spawn(async move { axum::serve(listener, service).await }),
        )
    };
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let get = |base: &str, path: &str, token: &str| {
        http.get(format!("{base}{path}"))
            .header("authorization", format!("Bearer {token}"))
            .send()
    };

    // The API alone (UI off).
    let state = HttpState::new(
        store.clone(),
        Arc::default(),
        Some("api-secret-0123".into()),
    )
    .with_login_limit(&http_cfg)
    .expect("limit")
    .with_clock(clock.clone());
    let (base, server) = serve(state).await;
    // No token at all is no guess: it does not count.
    for _ in 0..5 {
        let r = http
            .get(format!("{base}/api/v1/conversations"))
            .send()
            .await
            .expect("get");
        assert_eq!(r.status(), 401);
    }
    for _ in 0..3 {
        let r = get(&base, "/api/v1/conversations", "guess")
            .await
            .expect("get");
        assert_eq!(r.status(), 401);
        clock.advance(Duration::from_secs(60));
    }
    for (path, token) in [
        ("/api/v1/conversations", "guess"),
        ("/api/v1/conversations", "api-secret-0123"),
        ("/api/v1/no-such-path", "api-secret-0123"),
        ("/api/", "api-secret-0123"),
    ] {
        let r = get(&base, path, token).await.expect("get");
        assert_eq!(r.status(), 429, "{path} {token}");
        assert_eq!(
            r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
            Some("420")
        );
        let body: Value = r.json().await.expect("json");
        assert_eq!(body["error"]["code"], "too_many_requests");
    }
    clock.advance(Duration::from_secs(420));
    let r = get(&base, "/api/v1/conversations", "api-secret-0123")
        .await
        .expect("get");
    assert_eq!(r.status(), 200, "the oldest failure left the window");
    server.abort();

    // With the UI on: one count for both doors.
    let ui_cfg = chat_bridge::config::Http {
        ui: true,
        ..http_cfg.clone()
    };
    let ui = chat_bridge::ui::Ui::new(
        &ui_cfg,
        chat_bridge::core::redact::Redactor::default(),
        tokio_util::sync::CancellationToken::new(),
    )
    .expect("ui");
    let state = HttpState::new(
        store.clone(),
        Arc::default(),
        Some("api-secret-0123".into()),
    )
    .with_ui(ui)
    .with_clock(clock.clone());
    let (base, server) = serve(state).await;
    for _ in 0..2 {
        let r = http
            .post(format!("{base}/ui/login"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body("token=guess")
            .send()
            .await
            .expect("login");
        assert_eq!(r.status(), 401);
    }
    let r = get(&base, "/api/v1/conversations", "guess")
        .await
        .expect("get");
    assert_eq!(r.status(), 401);
    let r = get(&base, "/api/v1/conversations", "api-secret-0123")
        .await
        .expect("get");
    assert_eq!(r.status(), 429, "two UI failures and one API failure");
    server.abort();
    store.close().await;
}
