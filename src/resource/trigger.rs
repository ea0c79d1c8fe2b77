//! enforce_fence(): a BEFORE UPDATE ... FOR EACH ROW trigger that refuses, with SF001, every
//! UPDATE that would lower the fence column (or set it to NULL once set), whatever client or
//! statement sends it.

use super::{find_fence_column, relation_display_name};
use crate::errors::{FencedError, RawError, StaleToken};
use crate::stats::{self, Checker};
use pgrx::pg_sys;

const DEFAULT_FENCE_COLUMN: &str = "fence";

pub fn fire(fcinfo: pg_sys::FunctionCallInfo) -> Result<pg_sys::Datum, RawError> {
    unsafe {
        let context = (*fcinfo).context;
        if context.is_null() || (*context).type_ != pg_sys::NodeTag::T_TriggerData {
            misuse("enforce_fence() can only be called as a trigger".into());
        }
        let data = context as *mut pg_sys::TriggerData;
        let event = (*data).tg_event;
        let fired_by_update = event & pg_sys::TRIGGER_EVENT_OPMASK == pg_sys::TRIGGER_EVENT_UPDATE;
        let fired_before = event & pg_sys::TRIGGER_EVENT_TIMINGMASK == pg_sys::TRIGGER_EVENT_BEFORE;
        let fired_for_row = event & pg_sys::TRIGGER_EVENT_ROW != 0;
        if !(fired_by_update && fired_before && fired_for_row) {
            misuse("enforce_fence() must be fired BEFORE UPDATE ... FOR EACH ROW".into());
        }
        let trigger = (*data).tg_trigger;
        let column_name = match (*trigger).tgnargs {
            0 => DEFAULT_FENCE_COLUMN.to_string(),
            1 => std::ffi::CStr::from_ptr(*(*trigger).tgargs)
                .to_string_lossy()
                .into_owned(),
            n => misuse(format!(
                "enforce_fence() takes one argument, the fence column; trigger has {n}"
            )),
        };
        let relation = (*data).tg_relation;
        let column = find_fence_column(relation, &column_name);
        let tupdesc = (*relation).rd_att;
        let value_of = |tuple: pg_sys::HeapTuple| {
            let mut is_null = false;
            let datum = pg_sys::SPI_getbinval(tuple, tupdesc, column.attnum as i32, &mut is_null);
            (!is_null).then_some(datum.value() as i64)
        };
        let new_tuple = (*data).tg_newtuple;
        let table = (*relation).rd_id;
        match (value_of((*data).tg_trigtuple), value_of(new_tuple)) {
            (Some(accepted), offered) if offered.is_none_or(|offered| offered < accepted) => {
                let stale = StaleToken {
                    resource: format!(
                        "column \"{column_name}\" of {}",
                        relation_display_name(relation)
                    ),
                    accepted,
                    offered,
                };
                stats::refused(Checker::EnforceFence, table, &stale);
                Err(RawError::from(stale))
            }
            (_, offered) => {
                // A row given its first fence, or one at least as high.
                if let Some(offered) = offered {
                    stats::accepted(Checker::EnforceFence, table, offered);
                }
                Ok(pg_sys::Datum::from(new_tuple))
            }
        }
    }
}

fn misuse(message: String) -> ! {
    FencedError::TriggerMisuse { message }.raise()
}
