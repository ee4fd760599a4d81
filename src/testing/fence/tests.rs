//! The register, its client and its checker, without ZooKeeper.

use super::FenceEventKind::*;
use super::*;

fn log(events: &[(FenceEventKind, u64, &str)]) -> Vec<FenceEvent> {
    events
        .iter()
        .enumerate()
        .map(|(i, (kind, token, worker))| FenceEvent {
            seq: i as u64,
            ..FenceEvent::new(*kind, *token, worker)
        })
        .collect()
}

#[test]
fn events_round_trip_through_text() {
    let e = FenceEvent {
        seq: 12,
        at: Duration::from_micros(1_500_250),
        kind: Rejected,
        token: 99,
        worker: "w-3".into(),
    };
    assert_eq!(e.to_string(), "12 1.500250 rejected 99 w-3");
    assert_eq!(e.to_string().parse::<FenceEvent>(), Ok(e));
    assert!("12 1.5 rejected 99".parse::<FenceEvent>().is_err());
    assert!("12 x rejected 99 w".parse::<FenceEvent>().is_err());
    assert!("12 1.5 written 99 w".parse::<FenceEvent>().is_err());
}

#[test]
fn register_answers_the_line_protocol() {
    let shared = RegisterShared {
        started: Instant::now(),
        state: Mutex::new(RegisterState::default()),
    };
    assert_eq!(shared.handle("READ\n"), "EMPTY");
    assert_eq!(shared.handle("ENTER 5 A\n"), "OK 0");
    assert_eq!(shared.handle("WRITE 5 A x = 1\n"), "OK 1");
    assert_eq!(shared.handle("READ"), "VALUE 5 x = 1");
    assert_eq!(shared.handle("WRITE 4 B y"), "REJECTED 2 5");
    assert_eq!(shared.handle("WRITE 5 A z"), "OK 3");
    assert!(shared.handle("WRITE five A z").starts_with("ERR "));
    assert!(shared.handle("JUMP 5 A").starts_with("ERR "));
    let kinds: Vec<_> = shared.lock().log.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [Enter, Accepted, Rejected, Accepted]);
}

#[test]
fn a_writer_without_enter_still_overlaps() {
    let report = FenceReport::check(&log(&[
        (Enter, 1, "A"),
        (Accepted, 2, "B"),
        (Accepted, 2, "A"),
    ]));
    // (A,2) never entered: its tenure opens at its write; B's write is before it, so only
    // a write inside both tenures counts. B is still inside (no exit): (A,2) and B overlap
    // from A's write on, but B wrote before. Not a violation.
    assert!(report.overlaps.is_empty(), "{report}");
    let report = FenceReport::check(&log(&[
        (Accepted, 2, "B"),
        (Accepted, 2, "A"),
        (Accepted, 2, "B"),
    ]));
    assert_eq!(report.overlaps.len(), 1, "{report}");
}

#[test]
fn re_entering_the_same_holder_is_not_an_overlap() {
    let report = FenceReport::check(&log(&[
        (Enter, 3, "A"),
        (Accepted, 3, "A"),
        (Exit, 3, "A"),
        (Enter, 3, "A"),
        (Accepted, 3, "A"),
    ]));
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.workers["A"].acquisitions, 2);
}
