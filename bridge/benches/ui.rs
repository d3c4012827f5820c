//! Issue 19: the history pages render fast enough to click through — a page of 500 conversations
//! and a conversation with 200 tool calls (each with ~2 KB of coloured output, some long enough to
//! fold) each under 100 ms of server time. Measured two ways in the same run: the rendering alone
//! (pure functions over what the store returned) and the whole request over loopback HTTP (store
//! queries + rendering + HTTP), on SQLite and, with `DATABASE_URL` set, on PostgreSQL.
//! `cargo bench -p chat-bridge --bench ui`; under `cargo test` it runs a short smoke pass.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chat_bridge::core::redact::Redactor;
use chat_bridge::http::{HttpState, router};
use chat_bridge::store::conversations::{self, Key};
use chat_bridge::store::{Store, history, permissions, tool_calls, turns};
use chat_bridge::ui::render::{self, Chrome, ListQuery, Listing};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "bench-token-0123456789";
const T0: i64 = 1_796_083_200_000;

fn output(i: usize) -> String {
    let lines = if i.is_multiple_of(10) { 120 } else { 25 };
    (0..lines)
        .map(|l| format!("\u{1b}[32m   Compiling\u{1b}[0m crate-{i}-{l} v0.1.0 (/work/crate-{l}) <ok> & done\n"))
        .collect()
}

/// 500 conversations, and one more with 200 tool calls over 20 turns (with approvals).
async fn seed(store: &Store) -> String {
    let mut tx = store.begin().await.expect("tx");
    for i in 0..500 {
        let thread = format!("{i}");
        let key = Key {
            platform: "slack",
            workspace: "T01",
            channel: "C01",
            thread: &thread,
        };
        conversations::find_or_create(
            tx.conn(),
            &key,
            "U01",
            &format!("cargo test -p crate-{i} <b>&</b>"),
            T0 + i as i64,
        )
        .await
        .expect("conversation");
    }
    let key = Key {
        platform: "slack",
        workspace: "T01",
        channel: "C01",
        thread: "big",
    };
    let conv = conversations::find_or_create(tx.conn(), &key, "U01", "the big one", T0 + 1000)
        .await
        .expect("conv")
        .0
        .id;
    let mut call = 0;
    for t in 0..20 {
        let at = T0 + 10_000 + t * 100_000;
        let turn = turns::start(
            tx.conn(),
            &conv,
            &format!("run the suite, part {t}"),
            "U01",
            at,
        )
        .await
        .expect("turn");
        for _ in 0..10 {
            let call_id = format!("call-{call}");
            let started = at + call as i64 * 10;
            tool_calls::start(
                tx.conn(),
                &conv,
                Some(&turn.id),
                &call_id,
                &format!("cargo test --package crate-{call}"),
                Some("execute"),
                started,
            )
            .await
            .expect("start");
            let outcome = match call % 20 {
                7 => "timed_out",
                13 => "failed",
                _ => "completed",
            };
            let out = output(call);
            let f = tool_calls::Finish {
                outcome,
                summary: Some("Command finished"),
                output: &out,
                exit_code: Some(0),
                signal: None,
            };
            tool_calls::finish(tx.conn(), &conv, &call_id, &f, started + 1500 + call as i64)
                .await
                .expect("finish");
            if call.is_multiple_of(10) {
                let req = permissions::NewRequest {
                    conversation_id: &conv,
                    turn_id: Some(&turn.id),
                    request_id: &format!("perm-{call}"),
                    call_id: Some(&call_id),
                    title: "cargo test",
                    options: r#"[{"optionId":"proceed_once","kind":"allow_once","name":"Allow"}]"#,
                    requester: "U01",
                    expires_at: started + 600_000,
                };
                let id = permissions::create(tx.conn(), &req, started)
                    .await
                    .expect("perm");
                permissions::resolve(tx.conn(), &id, "U02", "proceed_once", started + 5)
                    .await
                    .expect("resolve");
            }
            call += 1;
        }
        let end = turns::Ending {
            status: "ended",
            stop_reason: Some("end_turn"),
            end_cause: None,
            answer: Some("All green."),
        };
        turns::finish(tx.conn(), &turn.id, &end, at + 5000)
            .await
            .expect("end");
    }
    tx.commit().await.expect("commit");
    conv
}

fn stats(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort_unstable();
    (v[v.len() / 2], v[v.len() - 1])
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn bench(label: &str, store: Store, runs: usize) -> bool {
    let conv = seed(&store).await;
    let r = Redactor::default();
    let chrome = Chrome {
        who: "bench",
        now: T0 + 10_000_000,
    };
    let mut c = store.conn().await.expect("conn");
    let page = history::list(
        &mut c,
        &history::Filter {
            limit: Some(500),
            ..Default::default()
        },
    )
    .await
    .expect("list");
    assert_eq!(page.items.len(), 500);
    let detail = history::detail(&mut c, &conv)
        .await
        .expect("detail")
        .expect("found");
    assert_eq!(detail.tool_calls.len(), 200);
    let approvals = permissions::of_conversation(&mut c, &conv)
        .await
        .expect("approvals");
    drop(c);
    let q = ListQuery::default();
    let time = |f: &dyn Fn() -> usize| {
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f());
                t.elapsed()
            })
            .collect::<Vec<_>>()
    };
    let list_render = stats(time(&|| {
        render::list(&r, chrome, &q, &Listing::Page(&page), None)
            .into_string()
            .len()
    }));
    let conv_render = stats(time(&|| {
        render::conversation(&r, chrome, &detail, &approvals)
            .into_string()
            .len()
    }));
    let list_bytes = render::list(&r, chrome, &q, &Listing::Page(&page), None)
        .into_string()
        .len();
    let conv_bytes = render::conversation(&r, chrome, &detail, &approvals)
        .into_string()
        .len();

    // The whole request over loopback HTTP: store queries, rendering, HTTP.
    let http_cfg = chat_bridge::config::Http {
        ui: true,
        api_token: Some(TOKEN.into()),
        ..Default::default()
    };
    let ui = chat_bridge::ui::Ui::new(&http_cfg, Redactor::default(), CancellationToken::new())
        .expect("ui");
    let state = HttpState::new(store.clone(), Arc::default(), Some(TOKEN.into())).with_ui(ui);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let server = tokio::spawn(async move { axum::serve(listener, router(state)).await });
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let login = http
        .post(format!("{base}/ui/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={TOKEN}"))
        .send()
        .await
        .expect("login");
    let cookie = login
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .expect("cookie")
        .to_owned();
    let request = |path: String| {
        let (http, cookie) = (http.clone(), cookie.clone());
        async move {
            let mut v = Vec::new();
            for _ in 0..runs {
                let t = Instant::now();
                let r = http
                    .get(&path)
                    .header("cookie", &cookie)
                    .send()
                    .await
                    .expect("get");
                assert_eq!(r.status(), 200, "{path}");
                std::hint::black_box(r.bytes().await.expect("body"));
                v.push(t.elapsed());
            }
            stats(v)
        }
    };
    let list_http = request(format!("{base}/ui/?limit=500")).await;
    let conv_http = request(format!("{base}/ui/conversations/{conv}")).await;
    server.abort();
    store.close().await;

    println!(
        "ui {label}: 500 conversations   render p50 {:6.2} ms max {:6.2} ms · request p50 {:6.2} ms max {:6.2} ms · {} KiB",
        ms(list_render.0),
        ms(list_render.1),
        ms(list_http.0),
        ms(list_http.1),
        list_bytes / 1024
    );
    println!(
        "ui {label}: 200 tool calls      render p50 {:6.2} ms max {:6.2} ms · request p50 {:6.2} ms max {:6.2} ms · {} KiB",
        ms(conv_render.0),
        ms(conv_render.1),
        ms(conv_http.0),
        ms(conv_http.1),
        conv_bytes / 1024
    );
    let ok = list_http.0 < Duration::from_millis(100) && conv_http.0 < Duration::from_millis(100);
    println!(
        "ui {label}: target p50 request < 100 ms: {}",
        if ok { "met" } else { "MISSED" }
    );
    ok
}

#[tokio::main]
async fn main() {
    daemon_client::install_crypto_provider();
    let full = std::env::args().any(|a| a == "--bench");
    let runs = if full { 30 } else { 2 };
    let dir = tempfile::tempdir().expect("tmp");
    let sqlite = Store::open(&format!("sqlite://{}", dir.path().join("ui.db").display()))
        .await
        .expect("sqlite");
    let mut ok = bench("sqlite", sqlite, runs).await;
    if let Ok(url) = std::env::var("DATABASE_URL") {
        let admin = Store::connect(&url).await.expect("DATABASE_URL reachable");
        let name = format!("cb_ui_bench_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(admin.statements())
            .await
            .expect("create db");
        let (base, _) = url.rsplit_once('/').expect("url with a database");
        let pg = Store::open(&format!("{base}/{name}")).await.expect("open");
        ok &= bench("postgres", pg, runs).await;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE {name} WITH (FORCE)"
        )))
        .execute(admin.statements())
        .await
        .expect("drop db");
        admin.close().await;
    }
    if full && !ok {
        std::process::exit(1);
    }
}
