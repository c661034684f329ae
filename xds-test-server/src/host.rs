//! Where the test servers' tasks run (the loopback ADS server, the echo backend, the
//! fault proxy): the caller's tokio runtime, or one of their own on a thread when the
//! caller has none (an async-std test, a plain `#[test]`).

use std::sync::Arc;

/// Where the server's tasks run.
#[derive(Clone, Debug)]
pub(crate) enum Host {
    /// The runtime that created the server.
    Caller(tokio::runtime::Handle),
    /// A dedicated thread, whose runtime lives as long as `_keep_alive`.
    Thread {
        handle: tokio::runtime::Handle,
        _keep_alive: Arc<std::sync::mpsc::SyncSender<()>>,
    },
}

impl Host {
    /// The calling tokio runtime, or else a new one on a thread named `thread`, which
    /// runs until the last clone of the returned host is dropped.
    pub(crate) fn for_caller(thread: &str) -> Host {
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => Host::Caller(handle),
            Err(_) => {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a tokio runtime for a loopback server");
                let handle = rt.handle().clone();
                let (keep, until) = std::sync::mpsc::sync_channel::<()>(0);
                std::thread::Builder::new()
                    .name(thread.into())
                    .spawn(move || {
                        // Runs the server's tasks until the last handle is dropped.
                        rt.block_on(async move {
                            let _ = tokio::task::spawn_blocking(move || until.recv()).await;
                        });
                    })
                    .expect("a thread for a loopback server");
                Host::Thread {
                    handle,
                    _keep_alive: Arc::new(keep),
                }
            }
        }
    }

    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        match self {
            Host::Caller(handle) | Host::Thread { handle, .. } => handle,
        }
    }
}
