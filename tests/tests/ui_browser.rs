//! Issue 19 in a real headless browser (Debian's Chromium driven over WebDriver by `fantoccini`):
//! sign in, filter, open a conversation with a completed tool, a timeout and an approval, watch the
//! live view change when a command finishes, and see hostile text stay inert. Each page's screenshot
//! is saved under `target/ui-screenshots/` (the pictures in docs/ui.md come from there).
//!
//! Without `chromium` and `chromedriver` (scripts/test installs them with apt) the test says
//! SKIPPED loudly and passes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chat_bridge::app::Application;
use chat_bridge::channel::{Inbound, InboundKind, console};
use chat_bridge_tests::bridge::{config, settle};
use chat_bridge_tests::db::TestDb;
use chat_bridge_tests::recorder::Recorder;
use fantoccini::{ClientBuilder, Locator};
use serde_json::{Value, json};

const TOKEN: &str = "ui-browser-token-0123";

fn said(line: &str, user: &str, thread: &str) -> Inbound {
    let mut m = console::inbound(line);
    m.user = user.to_owned();
    m.target.thread = thread.to_owned();
    m
}

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
    let mut click = said("", "oncall", thread);
    click.kind = InboundKind::Action(perm.buttons[0].value.clone());
    app.core.accept(click).await.expect("accept");
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| PathBuf::from(d).join(name))
        .find(|p| p.is_file())
}

fn screenshots_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let dir = target.join("ui-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    dir
}

/// A chromedriver on a free loopback port, ended with the test.
async fn chromedriver(path: &PathBuf) -> (tokio::process::Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("addr")
        .port();
    let child = tokio::process::Command::new(path)
        .arg(format!("--port={port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("chromedriver starts");
    let url = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    for _ in 0..200 {
        if let Ok(r) = http.get(format!("{url}/status")).send().await
            && r.json::<Value>()
                .await
                .is_ok_and(|v| v["value"]["ready"] == true)
        {
            return (child, url);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("chromedriver did not become ready");
}

async fn shot(c: &fantoccini::Client, name: &str) {
    let png = c.screenshot().await.expect("screenshot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    std::fs::write(screenshots_dir().join(format!("{name}.png")), png).expect("write screenshot");
}

async fn count(c: &fantoccini::Client, css: &str) -> usize {
    c.find_all(Locator::Css(css)).await.expect("find").len()
}

async fn wait_until(c: &fantoccini::Client, what: &str, script: &str) {
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if c.execute(script, vec![]).await.expect("script") == json!(true) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the browser never saw {what}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_in_a_real_browser_sign_in_filter_timeline_live_view_and_inert_hostile_text() {
    let (Some(chromium), Some(driver)) = (which("chromium"), which("chromedriver")) else {
        eprintln!(
            "!!! SKIPPED: chromium and chromedriver are not installed (apt-get install chromium chromium-driver; scripts/test does) !!!"
        );
        return;
    };
    daemon_client::install_crypto_provider();
    let db = TestDb::new(chat_bridge::store::Backend::Sqlite).await;
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(&db.url, dir.path());
    cfg.http.listen = Some("127.0.0.1:0".into());
    cfg.http.api_token = Some(TOKEN.into());
    cfg.http.ui = true;
    cfg.shell_agent.require_approval = true;
    cfg.approvals.approvers = vec!["oncall".into()];
    let rec = Arc::new(Recorder::default());
    let app = Application::build(&cfg, rec.clone()).await.expect("build");
    run_approved(
        &app,
        &rec,
        "printf '\\033[32mbuild ok\\033[0m\\n'; echo 3 tests passed",
        "t-1",
    )
    .await;
    settle(&app).await;
    run_approved(&app, &rec, "timeout=1s echo partial; sleep 30", "t-1").await;
    settle(&app).await;
    run_approved(&app, &rec, r#"printf '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">\033[2J\033[H\033[5A\033[31mred\033[0m\n' # <b onmouseover=alert(3)>"#, "t-2").await;
    settle(&app).await;
    let base = format!("http://{}", app.http_addr.expect("listening"));

    let (_driver, driver_url) = chromedriver(&driver).await;
    let profile = tempfile::tempdir().expect("profile");
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,900", format!("--user-data-dir={}", profile.path().display())],
        }),
    );
    let c = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver_url)
        .await
        .expect("a browser session");

    // Signed out: the pages send to the sign-in form. A wrong token is refused; the right one lands
    // on the list, with a cookie scripts cannot read (HttpOnly).
    c.goto(&format!("{base}/ui/")).await.expect("goto");
    assert!(
        c.current_url()
            .await
            .expect("url")
            .path()
            .ends_with("/ui/login")
    );
    shot(&c, "login").await;
    c.find(Locator::Css("#token"))
        .await
        .expect("token field")
        .send_keys("wrong")
        .await
        .expect("type");
    c.find(Locator::Css("button[type=submit]"))
        .await
        .expect("button")
        .click()
        .await
        .expect("click");
    // A click does not wait for the page it submits: wait for the answer page.
    assert!(
        c.wait()
            .for_element(Locator::Css("p.error"))
            .await
            .expect("an error")
            .text()
            .await
            .expect("text")
            .contains("Wrong token")
    );
    c.find(Locator::Css("#token"))
        .await
        .expect("token field")
        .send_keys(TOKEN)
        .await
        .expect("type");
    c.find(Locator::Css("button[type=submit]"))
        .await
        .expect("button")
        .click()
        .await
        .expect("click");
    c.wait()
        .for_element(Locator::Css("#conversations"))
        .await
        .expect("the list");
    assert_eq!(
        c.execute("return document.cookie", vec![])
            .await
            .expect("js"),
        json!(""),
        "the session cookie is HttpOnly"
    );
    assert_eq!(count(&c, "#conversations tbody tr").await, 2);
    shot(&c, "conversations").await;

    // Filter with the form: by user, then by platform.
    c.find(Locator::Css("input[name=user]"))
        .await
        .expect("user")
        .send_keys("bob")
        .await
        .expect("type");
    c.find(Locator::Css(".filters button"))
        .await
        .expect("apply")
        .click()
        .await
        .expect("click");
    c.wait()
        .for_element(Locator::Css("p.empty"))
        .await
        .expect("nothing matches bob");
    assert_eq!(count(&c, "#conversations tbody tr").await, 0);
    c.find(Locator::Css("input[name=user]"))
        .await
        .expect("user")
        .clear()
        .await
        .expect("clear");
    c.find(Locator::Css("input[name=user]"))
        .await
        .expect("user")
        .send_keys("alice")
        .await
        .expect("type");
    c.find(Locator::Css("select[name=platform]"))
        .await
        .expect("platform")
        .select_by_value("console")
        .await
        .expect("select");
    c.find(Locator::Css(".filters button"))
        .await
        .expect("apply")
        .click()
        .await
        .expect("click");
    c.wait()
        .for_element(Locator::Css("#conversations tbody tr"))
        .await
        .expect("rows");
    assert_eq!(count(&c, "#conversations tbody tr").await, 2);
    assert!(
        c.current_url()
            .await
            .expect("url")
            .query()
            .is_some_and(|q| q.contains("user=alice") && q.contains("platform=console"))
    );

    // The first conversation: a completed tool with its colours, a timeout marked as an error, the
    // approvals with who decided.
    let mut conn = app.store.conn().await.expect("conn");
    let convs = chat_bridge::store::history::list(&mut conn, &Default::default())
        .await
        .expect("list")
        .items;
    drop(conn);
    let conv_of = |thread: &str| {
        convs
            .iter()
            .find(|c| c.thread == thread)
            .expect("conversation")
            .id
            .clone()
    };
    let first = conv_of("t-1");
    c.find(Locator::Css(&format!(
        "a[href='/ui/conversations/{first}']"
    )))
    .await
    .expect("row link")
    .click()
    .await
    .expect("click");
    c.wait()
        .for_element(Locator::Css("section.turn"))
        .await
        .expect("the timeline");
    let done = c
        .find(Locator::Css("li.tool[data-status=completed]"))
        .await
        .expect("the completed tool");
    assert!(done.text().await.expect("text").contains("✅"));
    let green = c
        .find(Locator::Css(
            "li.tool[data-status=completed] pre.out span.f2",
        ))
        .await
        .expect("green output");
    assert_eq!(green.text().await.expect("text"), "build ok");
    assert_ne!(
        green.css_value("color").await.expect("colour"),
        done.css_value("color").await.expect("colour"),
        "ANSI green is a colour of its own"
    );
    let timeout = c
        .find(Locator::Css("li.tool.error[data-status=timed_out]"))
        .await
        .expect("the timeout");
    let text = timeout.text().await.expect("text");
    assert!(
        text.contains("⏱") && text.contains("ERROR") && text.contains("partial"),
        "{text}"
    );
    assert_eq!(count(&c, "li.approval[data-status=decided]").await, 2);
    assert!(
        c.find(Locator::Css("li.approval"))
            .await
            .expect("approval")
            .text()
            .await
            .expect("text")
            .contains("Allow once by oncall")
    );
    shot(&c, "conversation").await;

    // The timeout's own page, and its output as a download link.
    timeout
        .find(Locator::Css("a.title"))
        .await
        .expect("title link")
        .click()
        .await
        .expect("click");
    c.wait()
        .for_element(Locator::Css("a.download"))
        .await
        .expect("the tool call page");
    assert!(
        c.find(Locator::Css("pre.out"))
            .await
            .expect("output")
            .text()
            .await
            .expect("text")
            .contains("partial")
    );
    shot(&c, "tool-call").await;

    // Hostile text renders inert: no script ran, no element was injected, nothing moved.
    c.goto(&format!("{base}/ui/conversations/{}", conv_of("t-2")))
        .await
        .expect("goto");
    c.wait()
        .for_element(Locator::Css("section.turn"))
        .await
        .expect("the timeline");
    assert_eq!(
        c.execute("return window.pwned === undefined", vec![])
            .await
            .expect("js"),
        json!(true)
    );
    assert_eq!(count(&c, "main script, main img, main b").await, 0);
    let out = c
        .find(Locator::Css("pre.out"))
        .await
        .expect("output")
        .text()
        .await
        .expect("text");
    assert!(
        out.contains("<script>window.pwned=1</script>") && out.starts_with("<script>"),
        "shown as text, nothing moved: {out:?}"
    );
    assert_eq!(
        c.find(Locator::Css("pre.out span.f1"))
            .await
            .expect("red")
            .text()
            .await
            .expect("text"),
        "red"
    );
    shot(&c, "hostile").await;

    // The overview draws.
    c.goto(&format!("{base}/ui/overview")).await.expect("goto");
    assert!(count(&c, "svg.chart rect").await >= 2);
    shot(&c, "overview").await;

    // Running now, live: a command shows up without a reload and leaves when it finishes.
    c.goto(&format!("{base}/ui/running")).await.expect("goto");
    c.wait()
        .for_element(Locator::Css("#no-turns"))
        .await
        .expect("nothing running");
    run_approved(&app, &rec, "sleep 3; echo slept", "t-3").await;
    wait_until(&c, "the running command", "return document.querySelector('#running-calls') !== null && document.querySelector('#running-calls').textContent.includes('sleep 3')").await;
    // From the bridge's own memory: who asked, where, and the command's heartbeats as they come.
    wait_until(&c, "a heartbeat of the running command", "const r = document.querySelector('#running-calls tr[data-heartbeats]'); return r !== null && Number(r.dataset.heartbeats) > 0 && r.textContent.includes(' ago')").await;
    let turn_row = c
        .find(Locator::Css("#open-turns tbody tr"))
        .await
        .expect("the open turn")
        .text()
        .await
        .expect("text");
    assert!(
        turn_row.contains("alice")
            && turn_row.contains("console")
            && turn_row.contains("last frame"),
        "{turn_row}"
    );
    shot(&c, "running").await;
    wait_until(
        &c,
        "the command finish",
        "return document.querySelector('#no-turns') !== null",
    )
    .await;
    let updates = c
        .execute(
            "return Number(document.getElementById('live').dataset.updates || 0)",
            vec![],
        )
        .await
        .expect("js");
    assert!(
        updates.as_i64().is_some_and(|n| n >= 2),
        "the page changed by server-sent events, not a reload: {updates}"
    );
    settle(&app).await;

    c.close().await.expect("close");
    app.shutdown().await;
    db.cleanup().await;
}
