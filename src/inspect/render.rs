//! Plain text: the pools and the claims as tables of left-aligned columns, and the demo's
//! picture of both.
use super::rows::ClaimRow;
use super::snapshot::Snapshot;

impl Snapshot {
    /// The pools as a table.
    pub fn pools_table(&self) -> String {
        let dash = |n: Option<i64>| n.map_or("-".to_string(), |n| n.to_string());
        let rows: Vec<Vec<String>> = self
            .pools
            .iter()
            .map(|p| {
                let conditions = match &p.problem {
                    Some(problem) => format!("{} ({problem})", p.conditions),
                    None => p.conditions.clone(),
                };
                vec![
                    p.kind.to_string(),
                    p.namespace.clone().unwrap_or_else(|| "-".into()),
                    p.name.clone(),
                    p.parent.clone().unwrap_or_else(|| "-".into()),
                    p.family.clone(),
                    dash(p.total),
                    dash(p.used),
                    dash(p.free),
                    p.waiting.to_string(),
                    p.counts_from.to_string(),
                    conditions,
                ]
            })
            .collect();
        table(
            &[
                "KIND",
                "NAMESPACE",
                "NAME",
                "PARENT",
                "FAMILY",
                "TOTAL",
                "USED",
                "FREE",
                "WAITING",
                "COUNTS FROM",
                "CONDITIONS",
            ],
            &rows,
        )
    }

    /// The claims as a table; with `messages`, the waiting position and the condition's message
    /// too.
    pub fn claims_table(&self, claims: &[&ClaimRow], messages: bool) -> String {
        let rows: Vec<Vec<String>> = claims
            .iter()
            .map(|c| {
                let mut row = vec![
                    c.namespace.clone(),
                    c.name.clone(),
                    c.pool.clone(),
                    c.ready.clone(),
                    c.reason.clone(),
                    c.address.clone().unwrap_or_else(|| "-".into()),
                ];
                if messages {
                    row.push(c.position.map_or("-".into(), |p| p.to_string()));
                    row.push(c.message.clone());
                }
                row
            })
            .collect();
        let mut headers = vec!["NAMESPACE", "NAME", "POOL", "READY", "REASON", "ADDRESS"];
        if messages {
            headers.extend(["POSITION", "MESSAGE"]);
        }
        table(&headers, &rows)
    }

    /// The demo's picture: pools, then claims.
    pub fn render(&self) -> String {
        let mut out = String::from("POOLS\n");
        out.push_str(&self.pools_table());
        out.push('\n');
        let (ready, exhausted) = self.tally();
        out.push_str(&format!(
            "CLAIMS ({} in all: {ready} Ready, {exhausted} PoolExhausted)\n",
            self.claims.len()
        ));
        let all: Vec<&ClaimRow> = self.claims.iter().collect();
        out.push_str(&self.claims_table(&all, false));
        out
    }
}

/// Plain-text columns, left-aligned, two spaces apart.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        text.trim_end().to_string() + "\n"
    };
    let mut out = line(headers.to_vec());
    if rows.is_empty() {
        out.push_str("(none)\n");
    }
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_their_columns() {
        let text = table(
            &["A", "LONGER"],
            &[
                vec!["wide cell".into(), "x".into()],
                vec!["y".into(), "z".into()],
            ],
        );
        assert_eq!(text, "A          LONGER\nwide cell  x\ny          z\n");
    }
}
