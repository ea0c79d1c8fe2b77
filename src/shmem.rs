//! Shared memory, when fenced_lock is preloaded: one pair of hooks asks for and places every
//! part (the grants table, the lease wakeups), and a guard for the LWLocks that protect them.

use pgrx::pg_sys;

/// A user of shared memory: `request` runs in the request hook (RequestAddinShmemSpace and
/// the like), `place` in the startup hook under AddinShmemInitLock (ShmemInitStruct).
pub struct Part {
    pub request: fn(),
    pub place: fn(),
}

static PARTS: std::sync::OnceLock<&'static [Part]> = std::sync::OnceLock::new();
static mut PREVIOUS_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;
static mut PREVIOUS_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;

/// From _PG_init, while shared_preload_libraries is being processed.
pub fn install_hooks(parts: &'static [Part]) {
    unsafe {
        let _ = PARTS.set(parts);
        PREVIOUS_REQUEST_HOOK = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(request_shared_memory);
        PREVIOUS_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(place_parts);
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn request_shared_memory() {
    unsafe {
        // Another library's hook may raise an ERROR: through the FFI guard, as Rust unwinds.
        if let Some(previous) = PREVIOUS_REQUEST_HOOK {
            pg_sys::ffi::pg_guard_ffi_boundary(|| previous());
        }
        PARTS
            .get()
            .into_iter()
            .flat_map(|parts| parts.iter())
            .for_each(|part| (part.request)());
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn place_parts() {
    unsafe {
        if let Some(previous) = PREVIOUS_STARTUP_HOOK {
            pg_sys::ffi::pg_guard_ffi_boundary(|| previous());
        }
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock; // AddinShmemInitLock
        let _initializing = LwLockGuard::acquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        PARTS
            .get()
            .into_iter()
            .flat_map(|parts| parts.iter())
            .for_each(|part| (part.place)());
    }
}

/// Holds an LWLock until dropped, so no path (an ERROR unwinding through Rust included) can
/// leave it held or release it twice.
pub struct LwLockGuard(*mut pg_sys::LWLock);

impl LwLockGuard {
    pub fn acquire(lock: *mut pg_sys::LWLock, mode: pg_sys::LWLockMode::Type) -> LwLockGuard {
        unsafe { pg_sys::LWLockAcquire(lock, mode) };
        LwLockGuard(lock)
    }
}

impl Drop for LwLockGuard {
    fn drop(&mut self) {
        unsafe { pg_sys::LWLockRelease(self.0) };
    }
}
