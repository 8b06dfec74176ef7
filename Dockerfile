# syntax=docker/dockerfile:1
# The inpool controller image: a static (musl) binary on distroless/static, running as the
# non-root user 65532. Build from the repository root:
#   docker build -t inpool:dev .
# (Not built by the tests: they run the binary directly.)

FROM rust:1.95-alpine AS build
# The Alpine image targets x86_64-unknown-linux-musl (or aarch64-unknown-linux-musl) natively,
# and musl binaries are statically linked by default; gcc and musl-dev build ring's C parts.
RUN apk add --no-cache gcc musl-dev
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
# Every target Cargo.toml declares must exist for Cargo to read the manifest.
COPY benches ./benches
COPY src ./src
RUN cargo build --release --locked --bin inpool \
 && cp target/release/inpool /inpool

FROM gcr.io/distroless/static:nonroot
COPY --from=build /inpool /inpool
USER 65532:65532
EXPOSE 8443 8081
ENTRYPOINT ["/inpool"]
