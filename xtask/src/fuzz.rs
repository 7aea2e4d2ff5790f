//! Fuzzing (filled in by the fuzz work).

pub fn run(_args: &[String]) -> Result<(), String> {
    Err("fuzz: not yet implemented".into())
}

pub fn smoke(_seconds: u64) -> Result<(), String> {
    Ok(())
}
