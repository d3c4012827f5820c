//! Discord as a [`Platform`]: its settings checks (S1, A1) and its start — the bot token checked
//! with `GET /users/@me`, serenity's client built, and its gateway connection run once this replica
//! is active.

use std::sync::Arc;

use anyhow::Context;
use secrecy::ExposeSecret;
use tokio::sync::mpsc;

use super::events::Access;
use super::{Gateway, http};
use crate::channel::{Arrival, BoxFuture};
use crate::config::{Config, required};
use crate::core::redact::Redactor;
use crate::platform::{Connected, Platform, Running, SectionSpec};

/// Discord (serenity's gateway in, its REST client out).
#[derive(Debug, Clone, Copy)]
pub struct DiscordPlatform;

impl Platform for DiscordPlatform {
    fn name(&self) -> &'static str {
        "discord"
    }

    fn section(&self) -> Option<SectionSpec> {
        Some(SectionSpec::of::<super::config::Discord>("discord"))
    }

    fn configured(&self, cfg: &Config) -> bool {
        cfg.discord().token.is_some()
    }

    fn credentials(&self) -> &'static str {
        "CHAT_BRIDGE_DISCORD__TOKEN"
    }

    fn check(&self, cfg: &Config, problems: &mut Vec<String>) {
        if cfg.discord().allowed_users.is_empty()
            && cfg.discord().allowed_roles.is_empty()
            && !cfg.access.open
        {
            problems.push(
                "no Discord allowlist (A1): set discord.allowed_users (CHAT_BRIDGE_DISCORD__ALLOWED_USERS='[\"123456789012345678\"]') or discord.allowed_roles (CHAT_BRIDGE_DISCORD__ALLOWED_ROLES) to who may run commands, or set access.open = true (CHAT_BRIDGE_ACCESS__OPEN=true) to let everyone in the guild, and anyone who can DM the bot, run them".into(),
            );
        }
    }

    fn access(&self, cfg: &Config) -> String {
        let d = &cfg.discord();
        if cfg.access.open && d.allowed_users.is_empty() && d.allowed_roles.is_empty() {
            "open to everyone (access.open)".to_owned()
        } else {
            format!(
                "{} allowed users, {} allowed roles",
                d.allowed_users.len(),
                d.allowed_roles.len()
            )
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
    let token = required(cfg.discord().token.as_ref(), "CHAT_BRIDGE_DISCORD__TOKEN")?;
    let rest = http(token.expose_secret(), &cfg.discord().api_base_url);
    let me = rest.get_current_user().await.map_err(|e| {
        anyhow::anyhow!("Discord refused the bot token or could not be reached ({e}); check CHAT_BRIDGE_DISCORD__TOKEN and discord.api_base_url")
    })?;
    tracing::info!(user = %me.id, "Discord accepted the bot token");
    let access = Access {
        channels: cfg.discord().allowed_channels.clone(),
        users: cfg.discord().allowed_users.clone(),
        roles: cfg.discord().allowed_roles.clone(),
        allow_dms: cfg.discord().allow_dms,
    };
    let redactor = Redactor::new(&cfg.redact.patterns).context("redact.patterns")?;
    let gateway = Gateway::build(rest, access, redactor, sink)
        .await
        .context("starting the Discord gateway client")?;
    let channel = Arc::new(gateway.channel.clone());
    Ok(Connected {
        channel,
        listen: Box::new(move |run: Running| Box::pin(gateway.run(run.stop))),
    })
}
