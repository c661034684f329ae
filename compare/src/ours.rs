//! The child for xds-proto's tokio client (`xds-adapter-tokio`).

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use xds_adapter_tokio::xds_proto_core::XdsResourceType;
use xds_adapter_tokio::{Bootstrap, Cds, Client, Eds, Lds, WatchUpdate};

use crate::child::{self, ChildArgs, Progress};
use xds_proto_testing::resources::mesh::LISTENER_NAME;

/// Watches the workload with one task per watcher, as a data plane's components
/// would, and reports when every watcher holds its resource.
pub async fn run(args: ChildArgs) -> ! {
    let bootstrap = Bootstrap::from_json_str(&format!(
        r#"{{"xds_servers": [{{"server_uri": "{}", "channel_creds": [{{"type": "insecure"}}],
              "server_features": ["xds_v3"]}}],
            "certificate_providers": {},
            "node": {{"id": "compare-ours", "cluster": "compare"}}}}"#,
        args.addr,
        xds_proto_testing::resources::mesh::certificate_providers_json()
    ))
    .expect("a valid bootstrap");
    let client = Client::builder(bootstrap)
        // Bigger than any run's duration: a slow run must not turn into
        // does-not-exist errors.
        .resource_timeout(args.timeout)
        .build()
        .expect("the client starts");

    let (listener, clusters, endpoints) = args.names();
    let progress = Arc::new(Progress::new(args.watcher_count()));
    let start = Instant::now();
    if listener {
        spawn_watcher::<Lds>(&client, LISTENER_NAME.to_string(), &progress);
    }
    for name in clusters {
        spawn_watcher::<Cds>(&client, name, &progress);
    }
    for name in endpoints {
        spawn_watcher::<Eds>(&client, name, &progress);
    }
    child::finish("ours", &args, &progress, start).await
}

/// One watcher: watch, settle on the first update, then keep the watch (and drain it).
fn spawn_watcher<T>(client: &Client, name: String, progress: &Arc<Progress>)
where
    T: XdsResourceType + Default,
{
    let client = client.clone();
    let progress = progress.clone();
    tokio::spawn(async move {
        let mut stream = match client.watch::<T>(&name).await {
            Ok(stream) => stream,
            Err(e) => return progress.failed(format!("watch {name}: {e}")),
        };
        let mut settled = false;
        while let Some(update) = stream.next().await {
            if settled {
                continue;
            }
            settled = true;
            match update {
                WatchUpdate::Changed(Ok(_)) => progress.received(),
                WatchUpdate::Changed(Err(e)) | WatchUpdate::AmbientError(e) => {
                    progress.failed(format!("{name}: {e}"))
                }
            }
        }
    });
}
