# syntax=docker/dockerfile:1
# chat-bridge: a multi-stage build — the release binary built on the Rust image, run on a slim
# Debian as an unprivileged user (uid 10001) with tini as PID 1 (it reaps the built-in shell
# agent's orphaned grandchildren). The root filesystem can be read-only: the process writes only
# to the working directory (/work, a volume) and /tmp.

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p chat-bridge --bin chat-bridge \
 && install -D -m 0755 target/release/chat-bridge /out/chat-bridge

FROM debian:bookworm-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates tini \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 chat-bridge \
 && useradd --uid 10001 --gid 10001 --home-dir /work --no-create-home --shell /usr/sbin/nologin chat-bridge \
 && install -d -o 10001 -g 10001 /work
COPY --from=build /out/chat-bridge /usr/local/bin/chat-bridge
USER 10001:10001
WORKDIR /work
ENV CHAT_BRIDGE_HTTP__LISTEN=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/chat-bridge"]
