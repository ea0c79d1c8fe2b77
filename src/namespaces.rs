//! Named keys: the namespace registry (`fenced_namespaces`) maps a name to the first int4 of
//! a key, and `fenced_key` hashes a text key to the second. The lookup on the acquire path is
//! an index scan through the access method, without SPI or SQL.

use crate::errors::{FencedError, OrRaise};
use crate::extension;
use crate::types::required;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// fenced_key: 32-bit FNV-1a over the key's UTF-8 bytes, read as a signed int4. Byte-wise,
/// so the same on every platform, endianness and PostgreSQL version.
pub fn fnv1a_32(bytes: &[u8]) -> i32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, &byte| {
        (hash ^ byte as u32).wrapping_mul(0x0100_0193)
    }) as i32
}

/// The int4 that a text key stands for in a fenced lock key: 32-bit FNV-1a of its UTF-8 bytes.
#[pg_extern(immutable, parallel_safe)]
fn fenced_key(key: Option<&str>) -> i32 {
    fnv1a_32(required(key, "fenced_key", "key").or_raise().as_bytes())
}

/// The registered id of namespace `name`, or 42704.
pub fn namespace_id(fcinfo: pg_sys::FunctionCallInfo, name: &str) -> i32 {
    let objects = extension::objects(fcinfo);
    let (table, index) = (objects.namespaces_table, objects.namespaces_name_index);
    unsafe {
        let relation = pg_sys::table_open(table, pg_sys::AccessShareLock as _);
        let mut key = pg_sys::ScanKeyData::default();
        let text = pg_sys::cstring_to_text_with_len(name.as_ptr().cast(), name.len() as i32);
        // Heap attribute number of `name`; systable_beginscan maps it to the index column.
        // ScanKeyInit compares with the C collation, but the btree is ordered by the column's
        // collation: with any other, the descent would take wrong turns and miss names.
        pg_sys::ScanKeyEntryInitialize(
            &mut key,
            0,
            extension::NAMESPACES_NAME_COLUMN,
            pg_sys::BTEqualStrategyNumber as _,
            pg_sys::InvalidOid,
            objects.namespaces_name_collation,
            pg_sys::Oid::from(pg_sys::F_TEXTEQ),
            pg_sys::Datum::from(text),
        );
        let scan = pg_sys::systable_beginscan(
            relation,
            index,
            true,
            pg_sys::GetActiveSnapshot(),
            1,
            &mut key,
        );
        let tuple = pg_sys::systable_getnext(scan);
        let ns = (!tuple.is_null()).then(|| {
            let mut is_null = false;
            let datum = pg_sys::SPI_getbinval(tuple, (*relation).rd_att, 1, &mut is_null);
            datum.value() as i32
        });
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(relation, pg_sys::AccessShareLock as _);
        ns.unwrap_or_else(|| {
            FencedError::UnknownNamespace {
                name: name.to_string(),
            }
            .raise()
        })
    }
}

/// The first column of the first row of `sql`, if there is a row and it is not NULL.
fn scalar<T: FromDatum + IntoDatum>(
    client: &pgrx::spi::SpiClient<'_>,
    sql: &str,
    args: &[pgrx::datum::DatumWithOid],
) -> Result<Option<T>, pgrx::spi::Error> {
    let rows = client.select(sql, Some(1), args)?;
    match rows.is_empty() {
        true => Ok(None),
        false => rows.first().get_one::<T>(),
    }
}

/// Registers namespace `name` with id `ns` (the lowest free positive id when NULL) and returns
/// the id. Registering the same name and id again is a no-op; a name or id already taken by
/// another entry raises 23505. Runs with the caller's rights: only roles that may INSERT into
/// fenced_namespaces (the owner, and roles it grants) can register.
#[pg_extern(volatile, parallel_unsafe)]
fn register_namespace(
    name: Option<&str>,
    ns: default!(Option<i32>, "NULL"),
    description: default!(Option<&str>, "NULL"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> i32 {
    let name = required(name, "register_namespace", "name").or_raise();
    // PostgreSQL's own 25006 in a read-only transaction and on a hot standby, before SPI
    // would try to assign a transaction id there (XX000).
    unsafe { pg_sys::PreventCommandIfReadOnly(c"register_namespace()".as_ptr()) };
    let table = extension::qualified(fcinfo, c"fenced_namespaces");
    Spi::connect_mut(|client| {
        let by_name: Option<i32> = scalar(
            client,
            &format!("SELECT ns FROM {table} WHERE name OPERATOR(pg_catalog.=) $1"),
            &[name.into()],
        )?;
        match (by_name, ns) {
            (Some(existing), None) => return Ok(existing),
            (Some(existing), Some(ns)) if existing == ns => return Ok(existing),
            (Some(existing), Some(_)) => FencedError::NamespaceTaken {
                message: format!("namespace \"{name}\" is already registered with id {existing}"),
            }
            .raise(),
            (None, _) => {}
        }
        let ns = match ns {
            Some(ns) => {
                let holder: Option<String> = scalar(
                    client,
                    &format!("SELECT name FROM {table} WHERE ns OPERATOR(pg_catalog.=) $1"),
                    &[ns.into()],
                )?;
                if let Some(holder) = holder {
                    FencedError::NamespaceTaken {
                        message: format!("namespace id {ns} is already registered as \"{holder}\""),
                    }
                    .raise();
                }
                ns
            }
            None => scalar::<i32>(
                client,
                &format!(
                    "SELECT pg_catalog.min(candidate) FROM pg_catalog.generate_series(1, \
                     (SELECT pg_catalog.count(*) OPERATOR(pg_catalog.+) 1 \
                        FROM {table})::pg_catalog.int4) candidate \
                     WHERE NOT EXISTS (SELECT 1 FROM {table} \
                                        WHERE ns OPERATOR(pg_catalog.=) candidate)"
                ),
                &[],
            )?
            .expect("count + 1 candidates leave one free"),
        };
        client.update(
            &format!("INSERT INTO {table} (ns, name, description) VALUES ($1, $2, $3)"),
            None,
            &[ns.into(), name.into(), description.into()],
        )?;
        Ok::<i32, pgrx::spi::Error>(ns)
    })
    .map_err(|error: pgrx::spi::Error| ("register_namespace", error))
    .or_raise()
}

#[cfg(test)]
mod tests {
    use super::fnv1a_32;

    // The values the README and docs/api.md give: a named key must hash the same on every
    // platform and release.
    #[test]
    fn fnv1a_32_is_the_published_hash() {
        assert_eq!(fnv1a_32(b""), 0x811c_9dc5_u32 as i32);
        assert_eq!(fnv1a_32(b"a"), -468_965_076);
        assert_eq!(fnv1a_32(b"foobar"), -1_080_231_576);
        assert_eq!(fnv1a_32("é".as_bytes()), fnv1a_32(&[0xc3, 0xa9]));
    }
}
