//! The interop tests' side of the repository's build scripts (`interop/*/build.sh`,
//! which fetch Go and its modules from Debian and print the binaries they built):
//! running one and reading its output, and whether a missing peer is a failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Whether the interop tests must run: `XDS_INTEROP_REQUIRED` set and not `0` (CI sets
/// it), which makes a peer that cannot be built a failure instead of a skip.
pub fn interop_required() -> bool {
    std::env::var("XDS_INTEROP_REQUIRED").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Runs `bash <repository>/<script> <args>` with no input, echoes its stderr with the
/// time it took, and returns its stdout, or why it failed.
pub fn run_build_script(script: &str, args: &[&str]) -> Result<String, String> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the test server is in the workspace");
    let script = repo.join(script);
    let started = Instant::now();
    let output = Command::new("bash")
        .arg(&script)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    let invocation = std::iter::once(script.display().to_string())
        .chain(args.iter().map(|a| a.to_string()))
        .collect::<Vec<_>>()
        .join(" ");
    if !output.status.success() {
        return Err(format!(
            "{invocation} failed ({}):\n{stderr}",
            output.status
        ));
    }
    eprintln!("{stderr}{invocation} ({:.1?})", started.elapsed());
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The binary a build script printed on its last line, if that is a file.
pub fn last_binary(stdout: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!("build.sh printed no binary path: {stdout:?}"))
    }
}
