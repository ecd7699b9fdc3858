//! Which node of a cluster a remote grantor asks next.

/// A cluster's addresses, most promising first: the leader a node named goes to the front,
/// a node that could not be reached to the back.
#[derive(Debug)]
pub(crate) struct AddrOrder {
    addrs: Vec<String>,
}

impl AddrOrder {
    pub(crate) fn new(addrs: Vec<String>) -> Self {
        AddrOrder { addrs }
    }

    /// The first address not yet `tried` in this call; the first of all once every one was.
    ///
    /// A call asks each node at most once while others remain: a node that just failed is
    /// not asked again because a follower still names it, which followers do until they
    /// elect another leader.
    pub(crate) fn next(&self, tried: &[String]) -> Option<String> {
        self.addrs
            .iter()
            .find(|a| !tried.contains(a))
            .or(self.addrs.first())
            .cloned()
    }

    /// A node named `addr` as the leader; unless this call already tried it, it is asked
    /// next and first by later calls. Whether it was followed.
    pub(crate) fn leader_named(&mut self, addr: &str, tried: &[String]) -> bool {
        if tried.iter().any(|t| t == addr) {
            return false;
        }
        self.move_to(addr, true);
        true
    }

    /// `addr` could not be reached, or knew no leader: later calls ask it last.
    pub(crate) fn unreachable(&mut self, addr: &str) {
        self.move_to(addr, false);
    }

    fn move_to(&mut self, addr: &str, front: bool) {
        self.addrs.retain(|x| x != addr);
        if front {
            self.addrs.insert(0, addr.to_string());
        } else {
            self.addrs.push(addr.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(addrs: &[&str]) -> AddrOrder {
        AddrOrder::new(addrs.iter().map(|a| a.to_string()).collect())
    }

    fn tried(addrs: &[&str]) -> Vec<String> {
        addrs.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn a_named_leader_is_asked_first_from_then_on() {
        let mut o = order(&["a", "b", "c"]);
        assert!(o.leader_named("c", &tried(&["a"])));
        assert_eq!(o.next(&tried(&["a"])).as_deref(), Some("c"));
        assert_eq!(o.next(&[]).as_deref(), Some("c"));
    }

    #[test]
    fn a_leader_named_after_it_failed_in_the_same_call_is_not_asked_again() {
        let mut o = order(&["a", "b", "c"]);
        o.unreachable("a");
        let t = tried(&["a", "b"]);
        assert!(!o.leader_named("a", &t), "b still names the lost leader");
        assert_eq!(o.next(&t).as_deref(), Some("c"));
        assert_eq!(o.next(&[]).as_deref(), Some("b"), "a stays last");
    }

    #[test]
    fn an_unreachable_node_goes_last() {
        let mut o = order(&["a", "b", "c"]);
        o.unreachable("a");
        assert_eq!(o.next(&[]).as_deref(), Some("b"));
        assert_eq!(o.next(&tried(&["b", "c"])).as_deref(), Some("a"));
    }

    #[test]
    fn once_every_node_was_tried_the_first_is_asked_again() {
        let o = order(&["a"]);
        assert_eq!(o.next(&tried(&["a"])).as_deref(), Some("a"));
        assert_eq!(order(&[]).next(&[]), None);
    }
}
