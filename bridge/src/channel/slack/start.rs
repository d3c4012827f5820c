//! Slack as a [`Platform`]: its settings checks (S1, A1) and its start — `auth.test` with the bot
//! token, then Socket Mode (dialling out with the app-level token) or the HTTP Events API (signed
//! requests on `slack.listen`) once this replica is active.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use secrecy::ExposeSecret;
use tokio::sync::mpsc;

use super::api::{SlackToken, WebApi};
use super::config::SlackMode;
use super::events::Access;
use super::{Slack, http_mode, socket};
use crate::channel::{Arrival, BoxFuture};
use crate::config::{Config, required};
use crate::platform::{Connected, Listener, Platform, Running, SectionSpec};

/// Slack (Socket Mode or the Events API in, the Web API out).
#[derive(Debug, Clone, Copy)]
pub struct SlackPlatform;

impl Platform for SlackPlatform {
    fn name(&self) -> &'static str {
        "slack"
    }

    fn section(&self) -> Option<SectionSpec> {
        Some(SectionSpec::of::<super::config::Slack>("slack"))
    }

    fn configured(&self, cfg: &Config) -> bool {
        cfg.slack().bot_token.is_some()
    }

    fn credentials(&self) -> &'static str {
        "CHAT_BRIDGE_SLACK__BOT_TOKEN"
    }

    fn check(&self, cfg: &Config, problems: &mut Vec<String>) {
        match cfg.slack().mode {
            SlackMode::Socket if cfg.slack().app_token.is_none() => problems.push(
                "CHAT_BRIDGE_SLACK__APP_TOKEN is not set (Socket Mode needs the app-level token; or set slack.mode = \"http\" and CHAT_BRIDGE_SLACK__SIGNING_SECRET)".into(),
            ),
            SlackMode::Http if cfg.slack().signing_secret.is_none() => problems.push(
                "CHAT_BRIDGE_SLACK__SIGNING_SECRET is not set (slack.mode = \"http\" verifies every request with it)".into(),
            ),
            _ => {}
        }
        if cfg.slack().allowed_users.is_empty() && !cfg.access.open {
            problems.push(
                "no Slack user allowlist (A1): set slack.allowed_users (CHAT_BRIDGE_SLACK__ALLOWED_USERS='[\"U0123ABCD\"]') to the people who may run commands, or set access.open = true (CHAT_BRIDGE_ACCESS__OPEN=true) to let everyone who can reach the bot, DMs included, run them".into(),
            );
        }
    }

    fn access(&self, cfg: &Config) -> String {
        if cfg.access.open && cfg.slack().allowed_users.is_empty() {
            "open to everyone (access.open)".to_owned()
        } else {
            format!("{} allowed users", cfg.slack().allowed_users.len())
        }
    }

    fn connect<'a>(
        &'a self,
        cfg: &'a Config,
        inbound: mpsc::Sender<Arrival>,
    ) -> BoxFuture<'a, anyhow::Result<Connected>> {
        Box::pin(connect(cfg, inbound))
    }
}

async fn connect(cfg: &Config, sink: mpsc::Sender<Arrival>) -> anyhow::Result<Connected> {
    let bot = required(
        cfg.slack().bot_token.as_ref(),
        "CHAT_BRIDGE_SLACK__BOT_TOKEN",
    )?;
    let api = WebApi::new(
        &cfg.slack().api_base_url,
        SlackToken::new(bot.expose_secret()),
    )?;
    let me = api
        .auth_test()
        .await
        .context("Slack auth.test failed; check CHAT_BRIDGE_SLACK__BOT_TOKEN")?;
    tracing::info!(user = %me.user_id, team = %me.team_id, "connected to Slack as the bot user");
    let slack = match cfg.slack().mode {
        SlackMode::Http => Slack::new(api.clone()).taking_requests(),
        SlackMode::Socket => Slack::new(api.clone()),
    };
    let connected = slack.connection_flag();
    let access = Access {
        channels: cfg.slack().allowed_channels.clone(),
        users: cfg.slack().allowed_users.clone(),
        allow_dms: cfg.slack().allow_dms,
    };
    let bot_user = me.user_id;
    let listen: Listener = match cfg.slack().mode {
        SlackMode::Socket => {
            let app_token = SlackToken::new(
                required(
                    cfg.slack().app_token.as_ref(),
                    "CHAT_BRIDGE_SLACK__APP_TOKEN",
                )?
                .expose_secret(),
            );
            Box::new(move |run: Running| {
                Box::pin(async move {
                    socket::run(api, app_token, bot_user, access, sink, run.stop, connected).await;
                    Ok(())
                })
            })
        }
        SlackMode::Http => {
            let secret = required(
                cfg.slack().signing_secret.as_ref(),
                "CHAT_BRIDGE_SLACK__SIGNING_SECRET",
            )?
            .clone();
            let text = cfg.slack().listen.clone();
            let addr: SocketAddr = text
                .parse()
                .with_context(|| format!("slack.listen {text:?}"))?;
            Box::new(move |run: Running| {
                Box::pin(async move {
                    let (_, server) = http_mode::serve(
                        addr,
                        secret.expose_secret(),
                        bot_user,
                        access,
                        sink,
                        run.stop,
                    )
                    .await
                    .with_context(|| format!("listening on {text} (slack.listen)"))?;
                    server.await.context("the Slack events listener failed")?;
                    Ok(())
                })
            })
        }
    };
    Ok(Connected {
        channel: Arc::new(slack),
        listen,
    })
}
