use crate::conversation::inbox::{EventKey, Marks};

fn key(n: u32) -> EventKey {
    ("slack".to_owned(), format!("Ev{n}"))
}

#[test]
fn d2_an_entry_is_marked_once_however_often_it_is_added() {
    let mut m = Marks::default();
    m.add(Some(key(1)));
    m.add(Some(key(1)));
    m.add(None);
    m.add(Some(key(2)));
    assert_eq!(m.pending(), vec![key(1), key(2)]);
}

#[test]
fn d2_a_commit_clears_only_what_it_marked() {
    let mut m = Marks::default();
    m.add(Some(key(1)));
    let marked = m.pending();
    // Added while the transaction was open: the next commit marks it.
    m.add(Some(key(2)));
    m.committed(&marked);
    assert_eq!(m.pending(), vec![key(2)]);
    assert!(!m.is_empty());
}

#[test]
fn s4_a_prompt_taken_back_is_not_marked_by_the_receipt() {
    let mut m = Marks::default();
    m.add(Some(key(1)));
    assert!(m.take(&key(1)), "it was waiting");
    assert!(!m.take(&key(1)), "taken once");
    assert!(m.is_empty());
}
