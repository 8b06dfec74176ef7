# syntax=docker/dockerfile:1
# The inpool controller image: a static (musl) binary on distroless/static, running as the
# non-root user 65532. Build from the repository root:
#   docker build -t inpool:dev .
# .github/workflows/release.yml builds it for linux/amd64 and linux/arm64, each on a native runner.
# No container engine runs the tests: tests/process/image.rs builds the binary from what the build
# stage copies, with its build arguments (by `cargo build`: all cargo-auditable adds is the
# dependency list), and runs it as this image would (static, uid 65532, read-only root).
#
# Both base images are pinned by the digest of their multi-arch index, so every build of a tag
# starts from the same bytes; the tag beside each digest is for readers. Dependabot (the docker
# ecosystem in .github/dependabot.yml) proposes new digests weekly. To read the current one:
#   docker buildx imagetools inspect rust:1.95-alpine
# tests/offline/release.rs fails on a FROM line without a digest.

FROM rust:1.95-alpine@sha256:606fd313a0f49743ee2a7bd49a0914bab7deedb12791f3a846a34a4711db7ed2 AS build
# The Alpine image targets x86_64-unknown-linux-musl (or aarch64-unknown-linux-musl) natively,
# and musl binaries are statically linked by default; gcc and musl-dev build ring's C parts.
RUN apk add --no-cache gcc musl-dev
# cargo-auditable builds as `cargo build` does and embeds the dependency tree (crate names,
# versions and sources from Cargo.lock) in a section of the binary, so that scanners such as
# Trivy, Syft and `cargo audit bin` list the crates of a static binary that has no package
# database beside it.
RUN cargo install cargo-auditable --locked --version 0.7.7
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
# Cargo reads every workspace member's manifest, and every target a manifest declares must exist,
# before it builds anything; `--package inpool` then builds the controller alone (the test bench
# in testenv/ and the conformance suite in conformance/ are only dev-dependencies).
COPY benches ./benches
COPY src ./src
COPY testenv/Cargo.toml ./testenv/
COPY testenv/src ./testenv/src
COPY conformance/Cargo.toml ./conformance/
COPY conformance/src ./conformance/src
RUN cargo auditable build --release --locked --package inpool --bin inpool \
 && cp target/release/inpool /inpool

FROM gcr.io/distroless/static:nonroot@sha256:e2e927ec666bae08560abb3c55d0659eceabb657f56b6782ab500a9fc7f555e3
COPY --from=build /inpool /inpool
USER 65532:65532
EXPOSE 8443 8081
ENTRYPOINT ["/inpool"]
