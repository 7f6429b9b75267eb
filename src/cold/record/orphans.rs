//! The drain's orphans: blocks whose address was allocated again before their free was read.
//! Their free was late (its thread was descheduled between the clock and the ring's store for
//! longer than the drain's hold) or never recorded (a full ring, a call after the thread's slot
//! was released). A late call that gives up such an address gives up the orphan, on its own
//! thread; an orphan whose free has not come within [`ORPHAN_NS`] of trace time is taken as
//! freed, on the thread that reused the address, and remembered a while longer so that a free
//! later still is known for what it is and does not take the new block. Pure bookkeeping: no
//! I/O, no ring access (the drain writes what this returns).
//! Until stop 44's CI failed on it, the free was written at the reuse, at once, and the late
//! free then took the new block's id: two lifetimes wrong, and one free on the wrong thread.

use std::collections::HashMap;

/// How long an orphan waits for its late free before it is taken as freed, ns of trace time.
pub const ORPHAN_NS: u64 = 250_000_000;
/// How long a taken orphan is remembered (its late free, if it comes, is then left out), ns.
pub const TAKEN_NS: u64 = 10 * ORPHAN_NS;

/// A block whose address was allocated again before its free was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Orphan {
    /// The block's id.
    pub id: u64,
    /// When its address was allocated again, ns of trace time.
    pub at_ns: u64,
    /// The thread index that allocated it again.
    pub thread: u32,
    /// Taken as freed already (its free written).
    taken: bool,
}

/// What a late call that gives up an address finds.
#[derive(Debug, PartialEq, Eq)]
pub enum Late {
    /// The orphan at that address, still live: the call gives it up.
    Live(Orphan),
    /// An orphan already taken as freed: the call's block is gone already.
    Taken,
    /// No orphan: the address's block in the live map is the call's.
    None,
}

/// Orphans by address (few: a late or lost free whose address was reused).
#[derive(Default)]
pub struct Orphans {
    map: HashMap<u64, Orphan>,
}

impl Orphans {
    /// Block `id` at `addr` was live when `thread` was served `addr` again at `at_ns`. Returns
    /// an orphan still live at that address (a third use: its free is not coming), which the
    /// caller takes as freed now.
    pub fn adopt(&mut self, addr: u64, id: u64, at_ns: u64, thread: u32) -> Option<Orphan> {
        let o = Orphan { id, at_ns, thread, taken: false };
        self.map.insert(addr, o).filter(|b| !b.taken)
    }

    /// A late call gives up `addr`.
    pub fn late(&mut self, addr: u64) -> Late {
        match self.map.remove(&addr) {
            Some(o) if o.taken => Late::Taken,
            Some(o) => Late::Live(o),
            None => Late::None,
        }
    }

    /// A late realloc that failed keeps its block: the orphan is one again.
    pub fn restore(&mut self, addr: u64, o: Orphan) {
        self.map.insert(addr, o);
    }

    /// The orphans to take as freed at `now_ns` (older than [`ORPHAN_NS`]; every live one with
    /// `all`), by id; forgets the taken ones older than [`TAKEN_NS`].
    pub fn due(&mut self, now_ns: u64, all: bool) -> Vec<Orphan> {
        if self.map.is_empty() {
            return Vec::new();
        }
        self.map.retain(|_, o| !o.taken || o.at_ns + TAKEN_NS > now_ns);
        let mut due = Vec::new();
        for o in self.map.values_mut() {
            if !o.taken && (all || o.at_ns + ORPHAN_NS <= now_ns) {
                o.taken = true;
                due.push(*o);
            }
        }
        due.sort_by_key(|o| o.id);
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_free_within_the_wait_takes_its_orphan() {
        let mut o = Orphans::default();
        assert_eq!(o.adopt(0x1000, 7, 5, 1), None);
        assert!(o.due(5 + ORPHAN_NS - 1, false).is_empty());
        assert_eq!(o.late(0x1000), Late::Live(Orphan { id: 7, at_ns: 5, thread: 1, taken: false }));
        assert_eq!(o.late(0x1000), Late::None);
    }

    #[test]
    fn an_orphan_past_the_wait_is_taken_once_then_forgotten() {
        let mut o = Orphans::default();
        o.adopt(0x1000, 7, 0, 1);
        o.adopt(0x2000, 3, 0, 2);
        let due = o.due(ORPHAN_NS, false);
        assert_eq!(due.iter().map(|d| d.id).collect::<Vec<_>>(), [3, 7]);
        assert!(o.due(ORPHAN_NS + 1, false).is_empty(), "taken twice");
        assert_eq!(o.late(0x1000), Late::Taken);
        o.due(TAKEN_NS, false);
        assert_eq!(o.late(0x2000), Late::None, "remembered past TAKEN_NS");
    }

    #[test]
    fn a_third_use_gives_back_the_first_orphan_and_all_takes_the_rest() {
        let mut o = Orphans::default();
        o.adopt(0x1000, 7, 0, 1);
        assert_eq!(o.adopt(0x1000, 9, 10, 2).map(|b| b.id), Some(7));
        assert_eq!(o.due(11, true).iter().map(|d| d.id).collect::<Vec<_>>(), [9]);
        assert_eq!(o.adopt(0x1000, 11, 12, 2), None, "a taken orphan is not given back again");
    }
}
