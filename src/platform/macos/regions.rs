//! The task's virtual-memory regions in an address range, from
//! `mach_vm_region`: where V8 remapped its embedded builtins (see
//! `crate::v8::remap`).

use super::sys::{
    self, mach_msg_type_number_t, mach_port_deallocate, mach_port_t, mach_task_self, vm_region_basic_info_64,
    MACH_PORT_NULL, VM_PROT_EXECUTE, VM_PROT_READ, VM_REGION_BASIC_INFO_64,
};
use crate::platform::mach::kern::IntoResult;

/// `VM_REGION_BASIC_INFO_COUNT_64`: the struct's size in 32-bit words.
const BASIC_INFO_COUNT: mach_msg_type_number_t =
    (std::mem::size_of::<vm_region_basic_info_64>() / std::mem::size_of::<i32>()) as mach_msg_type_number_t;
const _: () = assert!(BASIC_INFO_COUNT == 9);

/// A mapped region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    pub end: u64,
    pub readable: bool,
    pub executable: bool,
}

/// The regions that overlap `[start, end)`, in address order.
pub fn list(start: u64, end: u64) -> Vec<Region> {
    let mut out = Vec::new();
    let mut address = start;
    while address < end {
        let mut size = 0u64;
        // SAFETY: plain data; all-zero is valid.
        let mut info: vm_region_basic_info_64 = unsafe { std::mem::zeroed() };
        let mut count: mach_msg_type_number_t = BASIC_INFO_COUNT;
        let mut object: mach_port_t = MACH_PORT_NULL;
        // SAFETY: every out-pointer is valid; `info` has room for `count`
        // words of this flavor.
        let kr = unsafe {
            sys::mach_vm_region(
                mach_task_self(),
                &mut address,
                &mut size,
                VM_REGION_BASIC_INFO_64,
                &mut info as *mut vm_region_basic_info_64 as sys::vm_region_info_t,
                &mut count,
                &mut object,
            )
        };
        if object != MACH_PORT_NULL {
            // SAFETY: a right the call gave us.
            let _ = unsafe { mach_port_deallocate(mach_task_self(), object) };
        }
        if kr.into_result().is_err() || size == 0 || address >= end {
            break;
        }
        let protection = info.protection;
        out.push(Region {
            start: address,
            end: address.saturating_add(size),
            readable: protection & VM_PROT_READ != 0,
            executable: protection & VM_PROT_EXECUTE != 0,
        });
        address = address.saturating_add(size);
    }
    out
}
