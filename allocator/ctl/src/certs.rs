//! `leasectl certs init`: a development CA and per-role certificates.

use super::args::CertsCmd;
use super::error::CtlError;
use super::output::{Rendered, Table};
use leasehold_proto::transport::{DevPki, PkiSpec, DEFAULT_TRUST_DOMAIN};
use serde_json::json;
use std::time::SystemTime;

pub fn run(cmd: CertsCmd) -> Result<Rendered, CtlError> {
    let CertsCmd::Init {
        out,
        allocators,
        agents,
        admins,
        hosts,
        valid_days,
        force,
    } = cmd;
    let spec = PkiSpec {
        trust_domain: DEFAULT_TRUST_DOMAIN.to_string(),
        allocators,
        agents,
        admins,
        hosts,
        valid_days,
    };
    let pki =
        DevPki::generate(&spec, SystemTime::now()).map_err(|e| CtlError::Input(e.to_string()))?;
    let files = pki
        .write_to(&out, force)
        .map_err(|e| CtlError::Input(format!("{e} (pass --force to replace existing files)")))?;
    let mut t = Table::new(&["FILE"]);
    for f in &files {
        t.row(vec![f.display().to_string()]);
    }
    let text = format!(
        "wrote a development CA and {} certificates to {} (valid {valid_days} days)\n{}",
        spec.allocators.len() + spec.agents.len() + spec.admins.len(),
        out.display(),
        t.render()
    );
    let files: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    Ok(Rendered::new(text, json!({"dir": out, "files": files})))
}
