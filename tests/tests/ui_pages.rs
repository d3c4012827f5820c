//! Issue 19: the history pages under `/ui/` over real HTTP, on both backends — the gate, the
//! sign-in and its cookie, the strict CSP, every page with real data from the built-in shell agent
//! (a completed tool, a timeout, an approval), hostile text rendered inert, R7 on what pages show,
//! the live view's server-sent events, and chat's pointer leading to the tool call's page.

use std::sync::Arc;
use std::time::Duration;

use chat_bridge::app::Application;
use chat_bridge::channel::{Inbound, InboundKind, Tone, console};
use chat_bridge_tests::bridge::{config, settle};
use chat_bridge_tests::on_both;
use chat_bridge_tests::recorder::Recorder;

const TOKEN: &str = "ui-secret-token-0123";

fn said(line: &str, user: &str, thread: &str) -> Inbound {
    let mut m = console::inbound(line);
    m.user = user.to_owned();
    m.target.thread = thread.to_owned();
    m
}

fn click(value: &str, user: &str, thread: &str) -> Inbound {
    let mut m = said("", user, thread);
    m.kind = InboundKind::Action(value.to_owned());
    m
}

/// Sends `line` and approves the approval it asks for as `oncall`.
async fn run_approved(app: &Application, rec: &Recorder, line: &str, thread: &str) {
    let asked = rec
        .posts()
        .iter()
        .filter(|(_, m)| !m.buttons.is_empty())
        .count();
    app.core
        .accept(said(line, "alice", thread))
        .await
        .expect("accept");
    rec.wait_for("the approval message", |r| {
        r.posts()
            .iter()
            .filter(|(_, m)| !m.buttons.is_empty())
            .count()
            > asked
    })
    .await;
    let (_, perm) = rec
        .posts()
        .into_iter()
        .filter(|(_, m)| !m.buttons.is_empty())
        .nth(asked)
        .expect("buttons");
    app.core
        .accept(click(&perm.buttons[0].value, "oncall", thread))
        .await
        .expect("accept");
}

fn client() -> reqwest::Client {
    daemon_client::install_crypto_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

async fn post_login(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    tls: bool,
) -> reqwest::Response {
    let mut r = http
        .post(format!("{base}/ui/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(serde_urlencoded::to_string([("token", token)]).expect("form"));
    if tls {
        r = r.header("x-forwarded-proto", "https");
    }
    r.send().await.expect("login")
}

fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

on_both! {
    async fn ui_pages_sign_in_filter_timeline_tool_output_running_and_overview(db) {
        let dir = tempfile::tempdir().expect("tmp");
        let mut cfg = config(&db.url, dir.path());
        cfg.http.listen = Some("127.0.0.1:0".into());
        cfg.http.api_token = Some(TOKEN.into());
        cfg.http.ui = true;
        cfg.http.ui_url = Some("https://bridge.example.com/".into());
        cfg.shell_agent.require_approval = true;
        cfg.approvals.approvers = vec!["oncall".into()];
        let rec = Arc::new(Recorder::default());
        let app = Application::build(&cfg, rec.clone()).await.expect("build");
        run_approved(&app, &rec, "echo Hello UI", "t-1").await;
        settle(&app).await;
        run_approved(&app, &rec, "timeout=1s echo partial; sleep 30", "t-1").await;
        settle(&app).await;
        // Hostile text: markup, a script, cursor-moving escapes, a bidi override, and a secret (R7).
        run_approved(&app, &rec, r"printf '<script>alert(1)</script>\033[2J\033[H\033[31mred\033[0m <b>bold</b> \342\200\256evil xoxb-123456789012-abcdefghijkl\n' # <img src=x onerror=alert(2)>", "t-2").await;
        settle(&app).await;

        let base = format!("http://{}", app.http_addr.expect("listening"));
        let http = client();
        let get = |path: &str, cookie: Option<&str>| {
            let mut r = http.get(format!("{base}{path}"));
            if let Some(c) = cookie {
                r = r.header("cookie", format!("chat_bridge_ui={c}"));
            }
            r.send()
        };

        // Every response carries the strict CSP, the API's and health's included.
        for path in ["/ui/login", "/healthz", "/api/v1/conversations", "/ui/assets/ui.css"] {
            let r = get(path, None).await.expect(path);
            let csp = header(&r, "content-security-policy");
            assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
            assert_eq!(header(&r, "x-content-type-options"), "nosniff", "{path}");
        }
        // Not signed in: every page sends to the sign-in form; the event stream is a 401.
        // Where they were going rides along as `next` (the list itself needs none).
        for (path, next) in [("/ui/", ""), ("/ui/running", "?next=%2Fui%2Frunning"), ("/ui/overview?days=3", "?next=%2Fui%2Foverview%3Fdays%3D3"), ("/ui/conversations/x", "?next=%2Fui%2Fconversations%2Fx"), ("/ui/tool-calls/x", "?next=%2Fui%2Ftool-calls%2Fx"), ("/ui/tool-calls/x/output.txt", "?next=%2Fui%2Ftool-calls%2Fx%2Foutput.txt")] {
            let r = get(path, None).await.expect(path);
            assert_eq!((r.status().as_u16(), header(&r, "location")), (303, format!("/ui/login{next}")), "{path}");
        }
        // The form keeps a safe `next` (hidden field, and on the single sign-on link); never another site.
        let form = get("/ui/login?next=%2Fui%2Frunning", None).await.expect("form").text().await.expect("body");
        assert!(form.contains("name=\"next\" value=\"/ui/running\""), "{form}");
        for bad in ["https%3A%2F%2Fevil.example", "%2F%2Fevil.example%2Fui%2F", "%2Fui%2F%5C%5Cevil.example", "%2Fui%2F..%2F..%2Fapi%2Fv1", "%2Fapi%2Fv1%2Fconversations"] {
            let form = get(&format!("/ui/login?next={bad}"), None).await.expect("form").text().await.expect("body");
            assert!(!form.contains("name=\"next\""), "{bad}: {form}");
        }
        let login_to = |next: &str| {
            http.post(format!("{base}/ui/login"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(serde_urlencoded::to_string([("token", TOKEN), ("next", next)]).expect("form"))
                .send()
        };
        for (next, lands) in [("/ui/running", "/ui/running"), ("/ui/overview?days=3", "/ui/overview?days=3"), ("https://evil.example/ui/", "/ui/"), ("//evil.example/ui/", "/ui/"), ("/ui/\\evil.example", "/ui/"), ("/\\evil.example", "/ui/"), ("/ui/../x", "/ui/"), ("/ui/login", "/ui/")] {
            let r = login_to(next).await.expect("login");
            assert_eq!((r.status().as_u16(), header(&r, "location")), (303, lands.to_owned()), "{next}");
        }
        assert_eq!(get("/ui/running/events", None).await.expect("events").status(), 401);
        let form = get("/ui/login", None).await.expect("form").text().await.expect("body");
        assert!(form.contains("name=\"token\"") && form.contains("method=\"post\""), "{form}");

        // A wrong token: 401, no cookie. The right one: a cookie that is HttpOnly, SameSite=Strict,
        // and Secure when the request came over TLS.
        for wrong in ["", "wrong", &TOKEN[..TOKEN.len() - 1], &format!("{TOKEN}x")] {
            let r = post_login(&http, &base, wrong, false).await;
            assert_eq!(r.status(), 401, "{wrong:?}");
            assert!(header(&r, "set-cookie").is_empty());
        }
        let r = post_login(&http, &base, TOKEN, false).await;
        assert_eq!((r.status().as_u16(), header(&r, "location")), (303, "/ui/".to_owned()));
        let set = header(&r, "set-cookie");
        assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Path=/ui"), "{set}");
        let tls = header(&post_login(&http, &base, TOKEN, true).await, "set-cookie");
        assert!(tls.ends_with("; Secure"), "{tls}");
        let cookie = set.split(';').next().and_then(|p| p.strip_prefix("chat_bridge_ui=")).expect("value").to_owned();
        assert!(!cookie.contains(TOKEN), "the cookie is not the token");
        let c = Some(cookie.as_str());
        // A tampered cookie is no session.
        let last = if cookie.ends_with('0') { '1' } else { '0' };
        let tampered = format!("{}{last}", &cookie[..cookie.len() - 1]);
        let r = get("/ui/", Some(&tampered)).await.expect("list");
        assert_eq!(r.status(), 303);

        // The list: both conversations; filters; search; cursor paging.
        let list = get("/ui/", c).await.expect("list");
        assert_eq!(list.status(), 200);
        assert_eq!(header(&list, "cache-control"), "no-store");
        let list = list.text().await.expect("body");
        assert_eq!(list.matches("href=\"/ui/conversations/").count(), 2, "{list}");
        for (query, rows) in [("?platform=slack", 0), ("?platform=console", 2), ("?user=alice", 2), ("?user=bob", 0), ("?status=closed", 0), ("?since=2999-01-01T00:00", 0), ("?until=2999-01-01T00:00", 2), ("?limit=1", 1)] {
            let page = get(&format!("/ui/{query}"), c).await.expect("list").text().await.expect("body");
            assert_eq!(page.matches("href=\"/ui/conversations/").count(), rows, "{query}: {page}");
        }
        let first = get("/ui/?limit=1", c).await.expect("page 1").text().await.expect("body");
        let next = first.split("class=\"next\" href=\"").nth(1).and_then(|s| s.split('"').next()).expect("a next link").replace("&amp;", "&");
        let second = get(&next, c).await.expect("page 2").text().await.expect("body");
        let id_of = |page: &str| page.split("href=\"/ui/conversations/").nth(1).and_then(|s| s.split('"').next()).map(str::to_owned);
        assert!(id_of(&second).is_some() && id_of(&second) != id_of(&first), "page 2 is another conversation");
        assert!(!second.contains("class=\"next\""), "the last page has no next link");
        let bad = get("/ui/?cursor=nonsense", c).await.expect("bad cursor");
        assert_eq!(bad.status(), 400);
        let hits = get("/ui/?q=hello%20ui", c).await.expect("search").text().await.expect("body");
        assert!(hits.contains("id=\"hits\"") && hits.contains("Hello UI"), "{hits}");

        // The timeline of the first conversation: the completed tool, the timeout marked as an
        // error, the approvals with who decided what, heartbeats and durations.
        let mut conn = app.store.conn().await.expect("conn");
        let convs = chat_bridge::store::history::list(&mut conn, &Default::default()).await.expect("list").items;
        drop(conn);
        let conv_of = |thread: &str| convs.iter().find(|c| c.thread == thread).expect("conversation").id.clone();
        let page = get(&format!("/ui/conversations/{}", conv_of("t-1")), c).await.expect("timeline").text().await.expect("body");
        assert!(page.contains("✅") && page.contains("echo Hello UI"), "{page}");
        assert!(page.contains("class=\"tool error\" data-status=\"timed_out\"") && page.contains("⏱") && page.contains("ERROR"), "{page}");
        assert!(page.contains("approval:") && page.contains("Allow once") && page.contains(" by oncall"), "{page}");
        assert!(page.contains("heartbeat"), "{page}");
        assert_eq!(page.matches("data-status=\"decided\"").count(), 2, "{page}");

        // Hostile text is inert: escaped markup, no escape sequences, the bidi override visible,
        // and the secret redacted (R7).
        let page = get(&format!("/ui/conversations/{}", conv_of("t-2")), c).await.expect("timeline").text().await.expect("body");
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{page}");
        assert!(page.contains("&lt;img src=x onerror=alert(2)&gt;"), "{page}");
        assert!(!page.contains("<script>alert") && !page.contains("<img") && !page.contains('\u{1b}') && !page.contains('\u{202e}'), "{page}");
        assert!(page.contains("<span class=\"f1\">red</span>") && page.contains("[U+202E]"), "{page}");
        assert!(page.contains("[redacted]") && !page.contains("xoxb-123456789012"), "{page}");

        // The timeout's chat pointer leads to its page; the page offers the output as a text file.
        let timeout = rec.latest().into_iter().map(|(_, m)| m).find(|m| m.tone == Tone::Error).expect("timeout message");
        let footer = timeout.footer.expect("pointer");
        let url = footer.split(" · ").nth(1).expect("a UI link").trim().to_owned();
        let path = url.strip_prefix("https://bridge.example.com").expect("the ui_url base");
        assert!(path.starts_with("/ui/tool-calls/"), "{footer}");
        let call_page = get(path, c).await.expect("tool call").text().await.expect("body");
        assert!(call_page.contains("partial") && call_page.contains("timed out") && call_page.contains("download as text"), "{call_page}");
        let r = get(&format!("{path}/output.txt"), c).await.expect("download");
        assert_eq!(r.status(), 200);
        assert!(header(&r, "content-disposition").starts_with("attachment; filename=\"tool-call-"));
        assert!(header(&r, "content-type").starts_with("text/plain"));
        assert_eq!(r.text().await.expect("body"), "partial\n");
        assert_eq!(get("/ui/tool-calls/nope", c).await.expect("404").status(), 404);
        assert_eq!(get("/ui/conversations/nope", c).await.expect("404").status(), 404);

        // The overview draws pictures.
        let overview = get("/ui/overview", c).await.expect("overview").text().await.expect("body");
        assert!(overview.contains("<svg") && overview.contains("class=\"s2\"") && overview.contains("timed out: <strong>1</strong>"), "{overview}");

        // Running now: nothing; then a command that takes a moment shows up live and goes.
        let running = get("/ui/running", c).await.expect("running").text().await.expect("body");
        assert!(running.contains("Nothing is running."), "{running}");
        let events = get("/ui/running/events", c).await.expect("events");
        assert_eq!(header(&events, "content-type"), "text/event-stream");
        let mut events = events;
        run_approved(&app, &rec, "sleep 2.5; echo slept", "t-3").await;
        let mut text = String::new();
        let mut seen_running = false;
        // The heartbeats the bridge counted in memory, as the stream shows them.
        let beats = |t: &str| t.split("data-heartbeats=\"").skip(1).filter_map(|s| s.split('"').next()?.parse::<u64>().ok()).max().unwrap_or(0);
        tokio::time::timeout(Duration::from_secs(20), async {
            while let Some(chunk) = events.chunk().await.expect("chunk") {
                text.push_str(&String::from_utf8_lossy(&chunk));
                if !seen_running && text.contains("⏳") && text.contains("sleep 2.5") && beats(&text) > 0 {
                    assert!(text.contains("alice") && text.contains("console · "), "{text}");
                    // The running tool links to its stored tool call's page, which is found.
                    let link = text.split("href=\"/ui/tool-calls/").nth(1).and_then(|s| s.split('"').next()).expect("a link to the running tool's page").to_owned();
                    let page = get(&format!("/ui/tool-calls/{link}"), c).await.expect("tool page");
                    assert_eq!(page.status(), 200, "/ui/tool-calls/{link}");
                    seen_running = true;
                    text.clear();
                } else if seen_running && text.contains("Nothing is running.") {
                    return;
                }
            }
        })
        .await
        .expect("the live view showed the command running with its heartbeats, then finished");
        settle(&app).await;

        // Sign-out clears the cookie.
        let r = http.post(format!("{base}/ui/logout")).header("cookie", format!("chat_bridge_ui={cookie}")).send().await.expect("logout");
        assert!(header(&r, "set-cookie").contains("Max-Age=0"));
        app.shutdown().await;
    }
}

/// Off by default: no page answers, and chat's pointer names the API.
#[tokio::test]
async fn ui_is_off_unless_configured() {
    use chat_bridge::http::{HttpState, router};
    let dir = tempfile::tempdir().expect("tmp");
    let url = format!("sqlite://{}", dir.path().join("ui.db").display());
    let store = chat_bridge::store::Store::open(&url).await.expect("store");
    let state = HttpState::new(store.clone(), Arc::default(), Some(TOKEN.into()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let server = tokio::spawn(async move { axum::serve(listener, router(state)).await });
    let http = client();
    for path in ["/ui/", "/ui/login", "/ui/assets/ui.css"] {
        let r = http.get(format!("{base}{path}")).send().await.expect(path);
        assert_eq!(r.status(), 404, "{path}");
    }
    let r = post_login(&http, &base, TOKEN, false).await;
    assert_eq!(r.status(), 404);
    server.abort();
    store.close().await;
}

/// `http.ui_auth_header`: the proxy's header signs people in (and only when configured); token
/// sign-in is off without an API token.
#[tokio::test]
async fn ui_trusted_proxy_header_is_honoured_only_when_configured() {
    use chat_bridge::http::{HttpState, router};
    use tokio_util::sync::CancellationToken;
    let dir = tempfile::tempdir().expect("tmp");
    let url = format!("sqlite://{}", dir.path().join("ui.db").display());
    let store = chat_bridge::store::Store::open(&url).await.expect("store");
    let serve = |header: Option<&str>| {
        let http_cfg = chat_bridge::config::Http {
            ui: true,
            ui_auth_header: header.map(str::to_owned),
            ..Default::default()
        };
        let ui = chat_bridge::ui::Ui::new(
            &http_cfg,
            chat_bridge::core::redact::Redactor::default(),
            CancellationToken::new(),
        )
        .expect("ui");
        let state = HttpState::new(store.clone(), Arc::default(), None).with_ui(ui);
        async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let base = format!("http://{}", listener.local_addr().expect("addr"));
            let server = tokio::spawn(async move { axum::serve(listener, router(state)).await });
            (base, server)
        }
    };
    let http = client();
    let (base, server) = serve(Some("X-Forwarded-Email")).await;
    let r = http
        .get(format!("{base}/ui/"))
        .header("x-forwarded-email", "dev@example.com")
        .send()
        .await
        .expect("list");
    assert_eq!(r.status(), 200);
    assert!(
        r.text()
            .await
            .expect("body")
            .contains("signed in: dev@example.com")
    );
    for (name, value) in [
        ("x-forwarded-user", "dev"),
        ("x-forwarded-email", ""),
        ("x-forwarded-email", "  "),
    ] {
        let r = http
            .get(format!("{base}/ui/"))
            .header(name, value)
            .send()
            .await
            .expect("list");
        assert_eq!(r.status(), 303, "{name}: {value:?}");
    }
    let form = http
        .get(format!("{base}/ui/login"))
        .send()
        .await
        .expect("form")
        .text()
        .await
        .expect("body");
    assert!(
        form.contains("is off") && !form.contains("name=\"token\""),
        "{form}"
    );
    assert_eq!(post_login(&http, &base, "", false).await.status(), 403);
    server.abort();
    // The same header without the setting is nobody.
    let (base, server) = serve(None).await;
    let r = http
        .get(format!("{base}/ui/"))
        .header("x-forwarded-email", "dev@example.com")
        .send()
        .await
        .expect("list");
    assert_eq!(r.status(), 303);
    server.abort();
    store.close().await;
}

/// Reads server-sent event frames (the text between blank lines) off a streaming response.
struct Frames {
    r: reqwest::Response,
    buf: String,
}

impl Frames {
    /// The next frame, within 10 s.
    async fn next(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Some(at) = self.buf.find("\n\n") {
                    let frame = self.buf[..at].to_owned();
                    self.buf.drain(..at + 2);
                    return frame;
                }
                let chunk = self
                    .r
                    .chunk()
                    .await
                    .expect("chunk")
                    .expect("the stream goes on");
                self.buf.push_str(&String::from_utf8_lossy(&chunk));
            }
        })
        .await
        .expect("a frame within 10 s")
    }
}

fn live_turn(tools: Vec<chat_bridge::core::live::LiveTool>) -> chat_bridge::core::live::LiveTurn {
    let now = chat_bridge::store::now_ms();
    chat_bridge::core::live::LiveTurn {
        conversation_id: "conv-1".into(),
        turn_id: "turn-1".into(),
        seq: 2,
        platform: "slack".into(),
        project: "payments".into(),
        channel: "C-ops".into(),
        user: "<b>alice</b>".into(),
        prompt: "make test <script>alert(1)</script>".into(),
        started_at: now - 65_000,
        last_frame: now - 2_000,
        stall_at: Some(now + 118_000),
        stalled: false,
        cancelling: false,
        queued: 1,
        tools,
    }
}

/// The live view's event stream reads the bridge's own memory (the live board conversations
/// publish on): one event at once, one per change (never for a publish that changes nothing), a
/// keep-alive comment while nothing changes, behind the same sign-in as the pages.
#[tokio::test]
async fn ui_live_events_push_each_change_of_the_open_turns_and_keep_alive() {
    use chat_bridge::core::live::LiveTool;
    use chat_bridge::http::{HttpState, router};
    use tokio_util::sync::CancellationToken;
    let dir = tempfile::tempdir().expect("tmp");
    let url = format!("sqlite://{}", dir.path().join("ui.db").display());
    let store = chat_bridge::store::Store::open(&url).await.expect("store");
    let status = Arc::new(chat_bridge::replica::Status::default());
    let board = status.live().clone();
    let http_cfg = chat_bridge::config::Http {
        ui: true,
        api_token: Some(TOKEN.into()),
        ..Default::default()
    };
    let stop = CancellationToken::new();
    let ui = chat_bridge::ui::Ui::new(
        &http_cfg,
        chat_bridge::core::redact::Redactor::default(),
        stop.clone(),
    )
    .expect("ui")
    .with_live_every(Duration::from_millis(20))
    .with_keep_alive(Duration::from_millis(300));
    let state = HttpState::new(store.clone(), status.clone(), Some(TOKEN.into())).with_ui(ui);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let server = tokio::spawn(async move { axum::serve(listener, router(state)).await });
    let http = client();
    let events = |cookie: Option<String>| {
        let mut r = http.get(format!("{base}/ui/running/events"));
        if let Some(c) = cookie {
            r = r.header("cookie", c);
        }
        r.send()
    };
    assert_eq!(events(None).await.expect("events").status(), 401);
    let set = header(&post_login(&http, &base, TOKEN, false).await, "set-cookie");
    let cookie = set.split(';').next().expect("cookie").to_owned();
    let r = events(Some(cookie.clone())).await.expect("events");
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), "text/event-stream");
    let mut frames = Frames {
        r,
        buf: String::new(),
    };

    // At once: what runs now (nothing).
    let first = frames.next().await;
    assert!(
        first.contains("event: running")
            && first.contains("id: 0")
            && first.contains("Nothing is running."),
        "{first}"
    );

    // A turn opens with a command that heartbeats: pushed, escaped, with its liveness.
    let runner = board.runner();
    let now = chat_bridge::store::now_ms();
    let tool = LiveTool {
        id: "sess-1/call-1".into(),
        title: "make test <img src=x>".into(),
        started_at: now - 60_000,
        heartbeats: 6,
        last_heartbeat: Some(now - 4_000),
        progress: Some(daemon_client::ShellProgress {
            total_lines: Some(42),
            timeout_ms: Some(600_000),
            ..Default::default()
        }),
        awaiting_approval: false,
        stored_id: Some("tc-1".into()),
    };
    // Not stored yet: shown without a link (its page would not be found).
    let unstored = LiveTool {
        id: "sess-1/call-2".into(),
        title: "not-stored-yet".into(),
        stored_id: None,
        ..tool.clone()
    };
    let turn = live_turn(vec![tool.clone(), unstored]);
    board.publish(runner, "conv-1", Some(turn.clone()));
    let opened = frames.next().await;
    assert!(opened.contains("id: 1"), "{opened}");
    for want in [
        "data-heartbeats=\"6\"",
        "⏳",
        "make test &lt;img src=x&gt;",
        "&lt;script&gt;alert(1)&lt;/script&gt;",
        "&lt;b&gt;alice&lt;/b&gt;",
        "payments",
        "slack · C-ops",
        "42 lines",
        "1 queued",
        " UTC is a stall",
        "ago",
        "href=\"/ui/tool-calls/tc-1\"",
        "href=\"/ui/conversations/conv-1#turn-2\"",
    ] {
        assert!(opened.contains(want), "{want}: {opened}");
    }
    assert!(
        !opened.contains("<script>") && !opened.contains("<img"),
        "{opened}"
    );
    // The running view links a tool to its stored id, never to the agent's call id (issue: it
    // linked `/ui/tool-calls/sess-1%2Fcall-1`, which is no page).
    assert!(
        !opened.contains("href=\"/ui/tool-calls/sess-1") && opened.contains("not-stored-yet"),
        "{opened}"
    );

    // Nothing changes (a publish of the same turn changes nothing): keep-alive comments only.
    board.publish(runner, "conv-1", Some(turn.clone()));
    let idle = frames.next().await;
    assert!(
        idle.starts_with(':') && !idle.contains("event:"),
        "a keep-alive comment: {idle}"
    );

    // Another heartbeat: pushed.
    let mut beat = turn.clone();
    beat.tools[0].heartbeats = 7;
    board.publish(runner, "conv-1", Some(beat));
    let mut next = frames.next().await;
    while next.starts_with(':') {
        next = frames.next().await;
    }
    assert!(
        next.contains("id: 2") && next.contains("data-heartbeats=\"7\""),
        "{next}"
    );

    // The page itself renders the same memory.
    let page = http
        .get(format!("{base}/ui/running"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("page")
        .text()
        .await
        .expect("body");
    assert!(
        page.contains("data-heartbeats=\"7\"") && page.contains("data-src=\"/ui/running/events\""),
        "{page}"
    );

    // The command finishes and the turn ends: pushed; and the stream ends when the bridge stops.
    board.publish(runner, "conv-1", None);
    let mut ended = frames.next().await;
    while ended.starts_with(':') {
        ended = frames.next().await;
    }
    assert!(
        ended.contains("id: 3") && ended.contains("Nothing is running."),
        "{ended}"
    );
    // A standby runs nothing and says so.
    status.set_role(chat_bridge::replica::Role::Standby);
    let page = http
        .get(format!("{base}/ui/running"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("page")
        .text()
        .await
        .expect("body");
    assert!(
        page.contains("This replica is standing by") && page.contains("Nothing is running."),
        "{page}"
    );
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), async {
        while frames.r.chunk().await.ok().flatten().is_some() {}
    })
    .await
    .expect("the stream ends when the bridge stops");
    server.abort();
    store.close().await;
}

/// The live stream ends with the session it was opened with — when the cookie expires, and when it
/// signs out (which also voids the cookie on this replica) — and a replica serves at most
/// `with_max_streams` of them at once (503 beyond).
#[tokio::test]
async fn ui_live_stream_ends_with_its_session_and_streams_are_capped() {
    use chat_bridge::clock::ManualClock;
    use chat_bridge::http::{HttpState, router};
    use tokio_util::sync::CancellationToken;
    let dir = tempfile::tempdir().expect("tmp");
    let url = format!("sqlite://{}", dir.path().join("ui.db").display());
    let store = chat_bridge::store::Store::open(&url).await.expect("store");
    let http_cfg = chat_bridge::config::Http {
        ui: true,
        api_token: Some(TOKEN.into()),
        ui_session_minutes: 1,
        ..Default::default()
    };
    let ui = chat_bridge::ui::Ui::new(
        &http_cfg,
        chat_bridge::core::redact::Redactor::default(),
        CancellationToken::new(),
    )
    .expect("ui")
    .with_live_every(Duration::from_millis(20))
    .with_keep_alive(Duration::from_millis(200))
    .with_max_streams(1);
    let clock = Arc::new(ManualClock::at(1_800_000_000_000));
    let state = HttpState::new(store.clone(), Arc::default(), Some(TOKEN.into()))
        .with_ui(ui)
        .with_clock(clock.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let server = tokio::spawn(async move { axum::serve(listener, router(state)).await });
    let http = client();
    let sign_in = || async {
        let set = header(&post_login(&http, &base, TOKEN, false).await, "set-cookie");
        set.split(';').next().expect("cookie").to_owned()
    };
    let open = |cookie: String| {
        http.get(format!("{base}/ui/running/events"))
            .header("cookie", cookie)
            .send()
    };
    let ends = |r: reqwest::Response| async move {
        let mut frames = Frames {
            r,
            buf: String::new(),
        };
        assert!(frames.next().await.contains("event: running"));
        tokio::time::timeout(Duration::from_secs(10), async {
            while frames.r.chunk().await.ok().flatten().is_some() {}
        })
        .await
        .is_ok()
    };

    // Expiry: a session with 1.5 s left; the stream ends when it does.
    let first = sign_in().await;
    clock.advance(Duration::from_millis(58_500));
    let r = open(first.clone()).await.expect("events");
    assert_eq!(r.status(), 200);
    let started = std::time::Instant::now();
    // Meanwhile the one stream this replica allows is taken.
    let second = sign_in().await;
    let refused = open(second.clone()).await.expect("events");
    assert_eq!(refused.status(), 503, "over the cap");
    assert!(!header(&refused, "retry-after").is_empty());
    clock.advance(Duration::from_millis(1_500));
    assert!(ends(r).await, "the stream ends when its session expires");
    assert!(started.elapsed() < Duration::from_secs(8));

    // Sign-out: the stream opened with that cookie ends, and the cookie no longer opens pages here.
    let r = open(second.clone()).await.expect("events");
    assert_eq!(r.status(), 200, "the expired stream gave its place back");
    let ended = tokio::spawn(ends(r));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let out = http
        .post(format!("{base}/ui/logout"))
        .header("cookie", &second)
        .send()
        .await
        .expect("logout");
    assert!(header(&out, "set-cookie").contains("Max-Age=0"));
    assert!(
        ended.await.expect("task"),
        "the stream ends when its session signs out"
    );
    let r = http
        .get(format!("{base}/ui/running"))
        .header("cookie", &second)
        .send()
        .await
        .expect("page");
    assert_eq!(r.status(), 303, "a signed-out cookie is refused");
    assert_eq!(
        open(second).await.expect("events").status(),
        401,
        "and opens no stream"
    );
    server.abort();
    store.close().await;
}
