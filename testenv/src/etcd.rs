//! etcd's maintenance calls on a [`ControlPlane`](crate::ControlPlane)'s etcd, for the fault
//! suite: compaction and defragmentation, as an operator's cron job or etcd's
//! `--auto-compaction-*` do to a real control plane.
//!
//! The control plane's etcd serves its client port on loopback, plain HTTP, with etcd's gRPC
//! gateway on (the `embed` default), so its JSON API answers here without an etcd client:
//! `POST /v3/kv/range` (the store's revision, in every answer's header),
//! `POST /v3/kv/compaction` and `POST /v3/maintenance/defragment`. The port is the one the
//! supervisor keeps in `<data dir>/ports.json`.

use std::path::Path;

use anyhow::Context as _;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;

/// The etcd of one control plane.
pub struct Etcd {
    port: u16,
}

impl Etcd {
    /// The etcd of the control plane whose data directory is `data_dir`.
    pub fn of(data_dir: &Path) -> anyhow::Result<Etcd> {
        let path = data_dir.join("ports.json");
        let ports: Value = serde_json::from_slice(
            &std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?,
        )?;
        let port = ports["etcdClient"]
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .with_context(|| format!("no etcdClient port in {}", path.display()))?;
        Ok(Etcd { port })
    }

    /// The store's current revision.
    pub async fn revision(&self) -> anyhow::Result<i64> {
        // Any range answers with the header; the key "/" base64-encoded, one key at most.
        let answer = self
            .call("/v3/kv/range", json!({"key": "Lw==", "limit": 1}))
            .await?;
        revision_of(&answer)
    }

    /// Compacts the store's history up to its current revision (physically: the call returns
    /// once the old revisions are gone) and returns that revision. A watch or a list that asks for
    /// an older revision from etcd gets "required revision has been compacted".
    pub async fn compact(&self) -> anyhow::Result<i64> {
        let revision = self.revision().await?;
        match self
            .call(
                "/v3/kv/compaction",
                json!({"revision": revision.to_string(), "physical": true}),
            )
            .await
        {
            Ok(_) => Ok(revision),
            // Compacted there already (the API server compacts too, every 5 minutes by
            // default): the history ends where it was asked to.
            Err(e)
                if e.to_string()
                    .contains("required revision has been compacted") =>
            {
                Ok(revision)
            }
            Err(e) => Err(e),
        }
    }

    /// Defragments the store: etcd rewrites its database file, and blocks reads and writes
    /// while it does.
    pub async fn defragment(&self) -> anyhow::Result<()> {
        self.call("/v3/maintenance/defragment", json!({})).await?;
        Ok(())
    }

    async fn call(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        let stream = TcpStream::connect(("127.0.0.1", self.port))
            .await
            .with_context(|| format!("connecting to etcd on port {}", self.port))?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        let request = hyper::Request::post(path)
            .header("host", format!("127.0.0.1:{}", self.port))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        anyhow::ensure!(
            status.is_success(),
            "etcd {path}: {status}: {}",
            String::from_utf8_lossy(&bytes)
        );
        Ok(serde_json::from_slice(&bytes)?)
    }
}

/// `header.revision` of an answer (the gateway writes 64-bit integers as strings).
fn revision_of(answer: &Value) -> anyhow::Result<i64> {
    let revision = &answer["header"]["revision"];
    revision
        .as_str()
        .and_then(|r| r.parse().ok())
        .or_else(|| revision.as_i64())
        .with_context(|| format!("no revision in etcd's answer {answer}"))
}
