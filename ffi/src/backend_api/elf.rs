//! Reads the `DT_NEEDED` names of an ELF64 little-endian shared library, in safe Rust over
//! its bytes: the loader uses them to see which name a backend expects Triton's core under.

/// The libraries `bytes` (a whole ELF file) names as `DT_NEEDED`, in order.
pub fn needed(bytes: &[u8]) -> Result<Vec<String>, String> {
    let u16_at = |o: usize| bytes.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let u64_at = |o: usize| bytes.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    if bytes.get(..4) != Some(b"\x7fELF") || bytes.get(4) != Some(&2) || bytes.get(5) != Some(&1) {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let bad = || "truncated ELF headers".to_string();
    let phoff = u64_at(0x20).ok_or_else(bad)? as usize;
    let (phentsize, phnum) = (u16_at(0x36).ok_or_else(bad)?, u16_at(0x38).ok_or_else(bad)?);
    // (type, offset, vaddr, filesz) of each program header.
    let headers: Vec<(u32, u64, u64, u64)> = (0..phnum)
        .map(|i| {
            let h = phoff + i * phentsize;
            let kind = bytes.get(h..h + 4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
            Some((kind?, u64_at(h + 0x08)?, u64_at(h + 0x10)?, u64_at(h + 0x20)?))
        })
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    let Some(&(_, dyn_off, _, dyn_size)) = headers.iter().find(|h| h.0 == 2) else {
        return Ok(Vec::new()); // PT_DYNAMIC absent: a static file needs nothing
    };
    let (mut names, mut strtab) = (Vec::new(), None);
    for entry in (dyn_off..dyn_off + dyn_size).step_by(16) {
        let (tag, val) = (u64_at(entry as usize).ok_or_else(bad)?, u64_at(entry as usize + 8).ok_or_else(bad)?);
        match tag {
            0 => break,
            1 => names.push(val),
            5 => strtab = Some(val),
            _ => {}
        }
    }
    let strtab = strtab.ok_or("no DT_STRTAB")?;
    // The string table's address, as a file offset through the PT_LOAD that holds it.
    let (_, off, vaddr, _) = headers
        .iter()
        .find(|h| h.0 == 1 && h.2 <= strtab && strtab < h.2 + h.3)
        .ok_or("DT_STRTAB is outside every PT_LOAD")?;
    let base = (strtab - vaddr + off) as usize;
    names
        .into_iter()
        .map(|n| {
            let start = base + n as usize;
            let rest = bytes.get(start..).ok_or_else(bad)?;
            let end = rest.iter().position(|&b| b == 0).ok_or_else(bad)?;
            Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_needed_libraries_of_the_alias_template() {
        let names = super::needed(super::super::library::ALIAS_TEMPLATE).unwrap();
        assert!(names.is_empty(), "the alias needs nothing: {names:?}");
    }

    #[test]
    fn reads_the_needed_libraries_of_a_system_library() {
        let Ok(bytes) = std::fs::read("/proc/self/exe") else { return };
        let names = super::needed(&bytes).unwrap();
        assert!(names.iter().any(|n| n.starts_with("libc.so")), "{names:?}");
    }

    #[test]
    fn refuses_what_is_not_elf() {
        assert!(super::needed(b"#!/bin/sh\n").is_err());
    }
}
