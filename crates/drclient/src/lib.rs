//! Where splab's DynamoRIO client and DynamoRIO itself are, when the
//! build made them (x86-64 Linux). `build.rs` compiles `client/ring.c`
//! (the reference stream written into splab's rings) and the two clients
//! that measure DynamoRIO's own cost (`client/null.c`, `client/count.c`)
//! against DynamoRIO, which it builds from source with CMake (when cmake
//! is missing or a step fails, splab is built without them and
//! `dynamorio()` says why).

use std::path::PathBuf;

/// What a program run under DynamoRIO needs: the library that is executed
/// in the program's place (it loads the program itself) and the client.
#[derive(Clone, Debug)]
pub struct DynamoRio {
    /// `libdynamorio.so`: executed with the program's arguments and
    /// `DYNAMORIO_EXE_PATH` naming the program.
    pub library: PathBuf,
    /// The directory of the clients (`libsplabdr.so`, `libsplabdr_null.so`,
    /// `libsplabdr_count.so`).
    pub clients: PathBuf,
}

impl DynamoRio {
    /// The client that writes the reference stream into splab's rings.
    pub fn ring_client(&self) -> PathBuf {
        self.clients.join("libsplabdr.so")
    }
}

/// DynamoRIO and the clients, or why there are none.
pub fn dynamorio() -> Result<DynamoRio, String> {
    let (Some(lib), Some(clients)) = (option_env!("SPLAB_DR_LIBRARY"), option_env!("SPLAB_DR_CLIENTS")) else {
        return Err(option_env!("SPLAB_DR_MISSING").unwrap_or("DynamoRIO was not built").to_string());
    };
    let d = DynamoRio { library: lib.into(), clients: clients.into() };
    for p in [&d.library, &d.ring_client()] {
        if !p.is_file() {
            return Err(format!("{} is missing (rebuild splab)", p.display()));
        }
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    fn dynamorio_and_the_client_were_built() {
        let d = super::dynamorio().unwrap();
        assert!(d.library.ends_with("libdynamorio.so"), "{}", d.library.display());
        for c in ["libsplabdr.so", "libsplabdr_null.so", "libsplabdr_count.so"] {
            assert!(d.clients.join(c).is_file(), "{c} missing from {}", d.clients.display());
        }
    }
}
