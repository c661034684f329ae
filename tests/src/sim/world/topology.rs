//! The servers a run's plan lays out: the top-level group (with a fallback server when
//! the plan lists one), and the authority's names either on servers of its own or on
//! the top-level ones; and the JSON the clients' bootstraps name them with.

use super::*;

/// What [`Topology::lay_out`] builds.
pub(super) struct Topology {
    pub(super) servers: Vec<ManagementServer>,
    pub(super) groups: Vec<Group>,
    /// The top-level servers as the bootstrap's `xds_servers` entries.
    pub(super) top_list: Vec<String>,
    /// The bootstrap's `"authorities"` member (with its leading comma), or nothing.
    pub(super) authorities: String,
}

impl Topology {
    /// Lays out `plan`'s servers; `delta[i]`: whether server `i` speaks delta.
    pub(super) fn lay_out(plan: &Plan, delta: &[bool]) -> Topology {
        // Servers: the top-level group, and the authority's own when it has them.
        let mut servers = Vec::new();
        let mut groups = Vec::new();
        let group_servers = |tag: &str, g: usize, servers: &mut Vec<ManagementServer>| {
            let mut ids = vec![servers.len()];
            servers.push(ManagementServer::new(
                format!("xds-{tag}.sim:443"),
                plan.policies[g],
            ));
            if plan.list_fallback {
                ids.push(servers.len());
                servers.push(ManagementServer::new(
                    format!("xds-{tag}2.sim:443"),
                    plan.policies[g],
                ));
            }
            ids
        };
        let top = group_servers("a", 0, &mut servers);
        let mut names0 = Vec::new();
        let mut names1 = Vec::new();
        for t in SIM_TYPES {
            for i in 0..3 {
                names0.push((t, format!("{}{i}", prefix(t))));
            }
            for i in 0..2 {
                names1.push((
                    t,
                    format!("xdstp://{AUTHORITY}/{}/{}{i}", type_path(t), prefix(t)),
                ));
            }
        }
        groups.push(Group {
            servers: top.clone(),
            features: plan.features[0],
            names: names0,
        });
        let mut authorities = String::new();
        match plan.authority {
            1 => {
                let own = group_servers("b", 1, &mut servers);
                let list: Vec<String> = own
                    .iter()
                    .map(|i| server_json(&servers[*i].uri, plan.features[1], delta[*i]))
                    .collect();
                authorities = format!(
                    r#", "authorities": {{"{AUTHORITY}": {{"xds_servers": [{}]}}}}"#,
                    list.join(", ")
                );
                groups.push(Group {
                    servers: own,
                    features: plan.features[1],
                    names: names1,
                });
            }
            2 => {
                authorities = format!(r#", "authorities": {{"{AUTHORITY}": {{}}}}"#);
                groups.push(Group {
                    servers: top.clone(),
                    features: plan.features[0],
                    names: names1,
                });
            }
            _ => {}
        }
        let top_list: Vec<String> = top
            .iter()
            .map(|i| server_json(&servers[*i].uri, plan.features[0], delta[*i]))
            .collect();
        Topology {
            servers,
            groups,
            top_list,
            authorities,
        }
    }
}
