//! Differences between the PostgreSQL majors fenced_lock builds for (15, 16, 18), in one place.
//! Each shim names the PostgreSQL change it bridges; everything else calls these.

use pgrx::pg_sys;

/// Whether this backend holds `tag` in exactly `mode`. PostgreSQL 17 added the `orstronger`
/// argument to LockHeldByMe (commit "Add a way to check for stronger locks").
pub fn lock_held_by_me(tag: &pg_sys::LOCKTAG, mode: pg_sys::LOCKMODE) -> bool {
    #[cfg(feature = "pg18")]
    return unsafe { pg_sys::LockHeldByMe(tag, mode, false) };
    #[cfg(not(feature = "pg18"))]
    return unsafe { pg_sys::LockHeldByMe(tag, mode) };
}

/// The attributes of a tuple descriptor. PostgreSQL 18 replaced the `attrs` array with
/// `compact_attrs`, followed in memory by the full FormData_pg_attribute array that
/// TupleDescAttr() returns ("Introduce CompactAttribute array in TupleDesc").
///
/// # Safety
/// `tupdesc` must be valid for as long as the returned slice is used.
pub unsafe fn attributes<'a>(tupdesc: pg_sys::TupleDesc) -> &'a [pg_sys::FormData_pg_attribute] {
    unsafe {
        let natts = (*tupdesc).natts as usize;
        #[cfg(feature = "pg18")]
        let first = (*tupdesc)
            .compact_attrs
            .as_ptr()
            .add(natts)
            .cast::<pg_sys::FormData_pg_attribute>();
        #[cfg(not(feature = "pg18"))]
        let first = (*tupdesc).attrs.as_ptr();
        std::slice::from_raw_parts(first, natts)
    }
}

/// Whether synchronous standbys are configured, as the walsenders' shared state says.
/// PostgreSQL 15.14 / 16.10 / 17.6 replaced `bool sync_standbys_defined` with the
/// `sync_standbys_status` bits (SYNC_STANDBY_INIT, SYNC_STANDBY_DEFINED), the same byte. The
/// 16 headers built against here are 16.2's, so on 16 the byte is read as it is and decoded by
/// the running server's minor version.
pub fn sync_standbys_defined(control: *const pg_sys::WalSndCtlData) -> bool {
    const SYNC_STANDBY_DEFINED: u8 = 1 << 1;
    #[cfg(not(feature = "pg16"))]
    let status = unsafe { (*control).sync_standbys_status };
    #[cfg(feature = "pg16")]
    let status = unsafe {
        let byte = std::ptr::addr_of!((*control).sync_standbys_defined)
            .cast::<u8>()
            .read();
        if server_version_num() >= 160010 {
            byte
        } else {
            // A bool: defined or not.
            if byte != 0 {
                SYNC_STANDBY_DEFINED
            } else {
                0
            }
        }
    };
    status & SYNC_STANDBY_DEFINED != 0
}

/// The running server's version, e.g. 160010 (not the headers' PG_VERSION_NUM).
#[cfg(feature = "pg16")]
fn server_version_num() -> i32 {
    use std::sync::OnceLock;
    static VERSION: OnceLock<i32> = OnceLock::new();
    *VERSION.get_or_init(|| unsafe {
        let value = pg_sys::GetConfigOption(c"server_version_num".as_ptr(), false, false);
        std::ffi::CStr::from_ptr(value)
            .to_str()
            .ok()
            .and_then(|text| text.parse().ok())
            .unwrap_or(0)
    })
}

/// A snapshot of the active search path, to tell later whether names would still resolve the
/// same way (the plan cache's test). PostgreSQL 17 renamed OverrideSearchPath to
/// SearchPathMatcher ("Remove PushOverrideSearchPath() and PopOverrideSearchPath()").
#[cfg(feature = "pg18")]
pub type SearchPathMatcher = pg_sys::SearchPathMatcher;
#[cfg(not(feature = "pg18"))]
pub type SearchPathMatcher = pg_sys::OverrideSearchPath;

/// The current search path, allocated in `memory`.
pub fn current_search_path(memory: pg_sys::MemoryContext) -> *mut SearchPathMatcher {
    #[cfg(feature = "pg18")]
    return unsafe { pg_sys::GetSearchPathMatcher(memory) };
    #[cfg(not(feature = "pg18"))]
    return unsafe { pg_sys::GetOverrideSearchPath(memory) };
}

/// Whether `path` (from `current_search_path`) is still the active search path.
///
/// # Safety
/// `path` must be valid.
pub unsafe fn search_path_is_current(path: *mut SearchPathMatcher) -> bool {
    #[cfg(feature = "pg18")]
    return unsafe { pg_sys::SearchPathMatchesCurrentEnvironment(path) };
    #[cfg(not(feature = "pg18"))]
    return unsafe { pg_sys::OverrideSearchPathMatchesCurrent(path) };
}

/// Whether `role` has USAGE on schema `namespace`. PostgreSQL 16 replaced the per-kind
/// aclcheck functions with object_aclcheck ("Generalize some ACL-related functions").
pub fn schema_usage_allowed(namespace: pg_sys::Oid, role: pg_sys::Oid) -> bool {
    let usage = pg_sys::ACL_USAGE as pg_sys::AclMode;
    #[cfg(feature = "pg15")]
    let result = unsafe { pg_sys::pg_namespace_aclcheck(namespace, role, usage) };
    #[cfg(not(feature = "pg15"))]
    let result =
        unsafe { pg_sys::object_aclcheck(pg_sys::NamespaceRelationId, namespace, role, usage) };
    result == pg_sys::AclResult::ACLCHECK_OK
}

/// Where a relation's storage is, as ReadRecentBuffer takes it. PostgreSQL 16 renamed
/// RelFileNode to RelFileLocator (and `rd_node` to `rd_locator`).
#[cfg(feature = "pg15")]
pub type Storage = pg_sys::RelFileNode;
#[cfg(not(feature = "pg15"))]
pub type Storage = pg_sys::RelFileLocator;

/// The storage of an open relation.
///
/// # Safety
/// `relation` must be open.
pub unsafe fn storage_of(relation: pg_sys::Relation) -> Storage {
    #[cfg(feature = "pg15")]
    return unsafe { (*relation).rd_node };
    #[cfg(not(feature = "pg15"))]
    return unsafe { (*relation).rd_locator };
}

/// Which of a table's indexes a new row version needs entries in.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum IndexEntries {
    None,
    /// Only the summarizing ones (BRIN), after a HOT update.
    Summarizing,
    All,
}

/// heap_update of the version at `otid`, without waiting for a transaction that is changing
/// it, and the index entries the new version needs. PostgreSQL 16 added the update_indexes
/// argument ("Allow HOT for BRIN indexes": summarizing indexes get entries after a HOT update
/// too); before it, a heap-only new version needs none.
///
/// # Safety
/// `relation` must be open with RowExclusiveLock, `new` a tuple of its descriptor.
pub unsafe fn heap_update_no_wait(
    relation: pg_sys::Relation,
    otid: &mut pg_sys::ItemPointerData,
    new: pg_sys::HeapTuple,
) -> (pg_sys::TM_Result::Type, IndexEntries) {
    unsafe {
        let cid = pg_sys::GetCurrentCommandId(true);
        let mut failure: pg_sys::TM_FailureData = std::mem::zeroed();
        let mut mode = pg_sys::LockTupleMode::LockTupleExclusive;
        let snapshot = std::ptr::null_mut();
        #[cfg(feature = "pg15")]
        {
            let result = pg_sys::heap_update(
                relation,
                otid,
                new,
                cid,
                snapshot,
                false,
                &mut failure,
                &mut mode,
            );
            let heap_only = (*(*new).t_data).t_infomask2 & pg_sys::HEAP_ONLY_TUPLE as u16 != 0;
            let entries = match heap_only {
                true => IndexEntries::None,
                false => IndexEntries::All,
            };
            (result, entries)
        }
        #[cfg(not(feature = "pg15"))]
        {
            let mut update_indexes = pg_sys::TU_UpdateIndexes::TU_None;
            let result = pg_sys::heap_update(
                relation,
                otid,
                new,
                cid,
                snapshot,
                false,
                &mut failure,
                &mut mode,
                &mut update_indexes,
            );
            let entries = match update_indexes {
                pg_sys::TU_UpdateIndexes::TU_None => IndexEntries::None,
                pg_sys::TU_UpdateIndexes::TU_Summarizing => IndexEntries::Summarizing,
                _ => IndexEntries::All,
            };
            (result, entries)
        }
    }
}

/// Whether an open index is a summarizing one (BRIN): `amsummarizing` came with PostgreSQL 16.
///
/// # Safety
/// `index` must be open.
pub unsafe fn summarizing(index: pg_sys::Relation) -> bool {
    #[cfg(feature = "pg15")]
    return {
        let _ = index;
        false
    };
    #[cfg(not(feature = "pg15"))]
    return unsafe { (*(*index).rd_indam).amsummarizing };
}

/// The wait event a waiting lease acquire sleeps under: on PostgreSQL 17 and later a named
/// extension wait event, `FencedLockLease` in pg_stat_activity (registered once per backend,
/// the same number in every backend); before, the generic `Extension`.
pub fn lease_wait_event() -> u32 {
    thread_local! {
        static LEASE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }
    LEASE.with(|event| named_wait_event(event, c"FencedLockLease"))
}

/// The wait event of the head of a permit line: `FencedLockPermit` (17 and later), as above.
pub fn permit_wait_event() -> u32 {
    thread_local! {
        static PERMIT: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }
    PERMIT.with(|event| named_wait_event(event, c"FencedLockPermit"))
}

/// The extension wait event `name`, registered at its first use in this backend (`event`
/// keeps its number).
fn named_wait_event(event: &std::cell::Cell<u32>, name: &core::ffi::CStr) -> u32 {
    #[cfg(feature = "pg18")]
    {
        if event.get() == 0 {
            event.set(unsafe { pg_sys::WaitEventExtensionNew(name.as_ptr()) });
        }
        event.get()
    }
    #[cfg(not(feature = "pg18"))]
    {
        let _ = (event, name);
        pg_sys::PG_WAIT_EXTENSION
    }
}

/// Whether `role` has the privileges of extension `extension`'s owner (superusers do).
/// PostgreSQL 16 folded the per-catalog ownership checks into object_ownercheck ("Generalize
/// ownership checks").
pub fn owns_extension(extension: pg_sys::Oid, role: pg_sys::Oid) -> bool {
    #[cfg(feature = "pg15")]
    return unsafe { pg_sys::pg_extension_ownercheck(extension, role) };
    #[cfg(not(feature = "pg15"))]
    return unsafe { pg_sys::object_ownercheck(pg_sys::ExtensionRelationId, extension, role) };
}
