//! The order to defragment the members in, or why not now (pure): every member healthy,
//! one leader they agree on, no CORRUPT alarm; followers by name, the leader last.

/// A member as one survey saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub id: u64,
    pub name: String,
    pub url: String,
    /// Its Status answer, or why there was none.
    pub state: Result<State, String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// The leader this member follows (0: none).
    pub leader: u64,
    pub db_size: i64,
    pub db_in_use: i64,
    pub raft_index: u64,
    /// etcd's own error strings (e.g. a NOSPACE alarm's).
    pub errors: Vec<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    #[error("no members answered the member list")]
    NoMembers,
    #[error("member {name} is not healthy: {why}")]
    Unhealthy { name: String, why: String },
    #[error("the members do not agree on one leader (an election is under way?)")]
    NoLeader,
    #[error(
        "member {name} has a CORRUPT alarm: do not defragment it; replace or restore it (docs: Operating, Restoring etcd safely)"
    )]
    Corrupt { name: String },
}

/// The order to defragment `seen` in (indexes into it): followers by name, the leader
/// last; or why not now. `corrupt`: member ids with a CORRUPT alarm. A NOSPACE alarm does
/// not refuse: defragmentation is its remedy (its error string is expected then).
pub fn plan(seen: &[Seen], corrupt: &[u64]) -> Result<Vec<usize>, Refusal> {
    if seen.is_empty() {
        return Err(Refusal::NoMembers);
    }
    let mut leaders = Vec::new();
    for m in seen {
        if corrupt.contains(&m.id) {
            return Err(Refusal::Corrupt {
                name: m.name.clone(),
            });
        }
        let state = m.state.as_ref().map_err(|why| Refusal::Unhealthy {
            name: m.name.clone(),
            why: why.clone(),
        })?;
        if let Some(e) = state.errors.iter().find(|e| !e.contains("NOSPACE")) {
            return Err(Refusal::Unhealthy {
                name: m.name.clone(),
                why: e.clone(),
            });
        }
        leaders.push(state.leader);
    }
    let leader = leaders[0];
    if leader == 0 || leaders.iter().any(|l| *l != leader) || !seen.iter().any(|m| m.id == leader) {
        return Err(Refusal::NoLeader);
    }
    let mut order: Vec<usize> = (0..seen.len()).collect();
    order.sort_by_key(|&i| (seen[i].id == leader, seen[i].name.clone()));
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: u64, name: &str, leader: u64) -> Seen {
        Seen {
            id,
            name: name.into(),
            url: format!("https://{name}:2379"),
            state: Ok(State {
                leader,
                db_size: 100,
                db_in_use: 10,
                raft_index: 7,
                errors: vec![],
            }),
        }
    }

    #[test]
    fn the_plan_table() {
        let healthy = vec![m(1, "c", 2), m(2, "a", 2), m(3, "b", 2)];
        let mut down = healthy.clone();
        down[2].state = Err("connection refused".into());
        let mut erring = healthy.clone();
        erring[0].state.as_mut().unwrap().errors = vec!["raft: slow disk".into()];
        let mut nospace = healthy.clone();
        nospace[0].state.as_mut().unwrap().errors =
            vec!["etcdserver: mvcc: database space exceeded (NOSPACE)".into()];
        let mut split = healthy.clone();
        split[1].state.as_mut().unwrap().leader = 3;
        let leaderless: Vec<Seen> = healthy
            .iter()
            .map(|s| {
                let mut s = s.clone();
                s.state.as_mut().unwrap().leader = 0;
                s
            })
            .collect();
        let gone_leader: Vec<Seen> = healthy
            .iter()
            .map(|s| {
                let mut s = s.clone();
                s.state.as_mut().unwrap().leader = 9;
                s
            })
            .collect();
        type Case = (
            &'static str,
            Vec<Seen>,
            Vec<u64>,
            Result<Vec<usize>, Refusal>,
        );
        let cases: Vec<Case> = vec![
            (
                "followers by name, then the leader",
                healthy.clone(),
                vec![],
                Ok(vec![2, 0, 1]),
            ),
            (
                "a member down refuses",
                down,
                vec![],
                Err(Refusal::Unhealthy {
                    name: "b".into(),
                    why: "connection refused".into(),
                }),
            ),
            (
                "a member reporting an error refuses",
                erring,
                vec![],
                Err(Refusal::Unhealthy {
                    name: "c".into(),
                    why: "raft: slow disk".into(),
                }),
            ),
            (
                "NOSPACE is what defragmentation is for",
                nospace,
                vec![],
                Ok(vec![2, 0, 1]),
            ),
            (
                "members disagreeing on the leader",
                split,
                vec![],
                Err(Refusal::NoLeader),
            ),
            ("no leader", leaderless, vec![], Err(Refusal::NoLeader)),
            (
                "a leader that is not a member",
                gone_leader,
                vec![],
                Err(Refusal::NoLeader),
            ),
            (
                "a CORRUPT alarm refuses",
                healthy.clone(),
                vec![3],
                Err(Refusal::Corrupt { name: "b".into() }),
            ),
            ("no members", vec![], vec![], Err(Refusal::NoMembers)),
            (
                "one member is its own leader",
                vec![m(5, "solo", 5)],
                vec![],
                Ok(vec![0]),
            ),
        ];
        for (name, seen, corrupt, want) in cases {
            assert_eq!(plan(&seen, &corrupt), want, "{name}");
        }
    }
}
