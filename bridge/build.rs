//! Rebuild when a migration changes: `sqlx::migrate!` embeds the migrations directories.

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
