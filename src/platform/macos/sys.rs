//! Every foreign call of the Mach backend, and nothing else. On Apple
//! targets these are `mach2` and `libc`; on Linux with the `machsim`
//! feature they are [`crate::platform::machsim`], a simulation of the same
//! calls, so the backend's own files are the same source in both builds.

#[cfg(target_vendor = "apple")]
mod imp {
    pub use libc::{
        clock_gettime, dladdr, dlopen, getpid, pthread_from_mach_thread_np, pthread_get_stackaddr_np,
        pthread_get_stacksize_np, pthread_mach_thread_np, pthread_main_np, pthread_self, pthread_set_qos_class_self_np,
        pthread_t, pthread_threadid_np, qos_class_t, size_t, sysctlbyname, thread_basic_info, thread_extended_info,
        thread_identifier_info, thread_info, thread_info_t, timespec, Dl_info, CLOCK_THREAD_CPUTIME_ID,
        MAXTHREADNAMESIZE, PTHREAD_INTROSPECTION_THREAD_START, PTHREAD_INTROSPECTION_THREAD_TERMINATE, RTLD_NODELETE,
        RTLD_NOLOAD, RTLD_NOW, THREAD_BASIC_INFO, THREAD_BASIC_INFO_COUNT, THREAD_EXTENDED_INFO,
        THREAD_EXTENDED_INFO_COUNT, THREAD_IDENTIFIER_INFO, THREAD_IDENTIFIER_INFO_COUNT,
    };
    pub use mach2::dyld::{
        _dyld_get_image_header, _dyld_get_image_name, _dyld_get_image_vmaddr_slide, _dyld_image_count,
    };
    pub use mach2::kern_return::{kern_return_t, KERN_FAILURE, KERN_INVALID_ARGUMENT, KERN_SUCCESS, KERN_TERMINATED};
    pub use mach2::mach_init::mach_thread_self;
    pub use mach2::mach_port::mach_port_deallocate;
    pub use mach2::mach_time::{mach_absolute_time, mach_timebase_info, mach_wait_until};
    pub use mach2::mach_types::{thread_act_array_t, thread_act_t};
    pub use mach2::message::{mach_msg_type_number_t, MACH_SEND_INVALID_DEST};
    pub use mach2::port::{mach_port_t, MACH_PORT_NULL};
    #[cfg(target_arch = "aarch64")]
    pub use mach2::structs::arm_thread_state64_t;
    #[cfg(target_arch = "x86_64")]
    pub use mach2::structs::x86_thread_state64_t;
    pub use mach2::task::{task_info, task_threads};
    pub use mach2::task_info::{task_dyld_info, TASK_DYLD_INFO, TASK_DYLD_INFO_COUNT};
    pub use mach2::thread_act::{thread_get_state, thread_resume, thread_suspend};
    pub use mach2::thread_status::thread_state_t;
    #[cfg(target_arch = "x86_64")]
    pub use mach2::thread_status::x86_THREAD_STATE64;
    #[cfg(target_arch = "aarch64")]
    pub use mach2::thread_status::ARM_THREAD_STATE64;
    pub use mach2::traps::mach_task_self;
    pub use mach2::vm::{mach_vm_deallocate, mach_vm_read_overwrite, mach_vm_region};
    pub use mach2::vm_prot::{VM_PROT_EXECUTE, VM_PROT_READ};
    pub use mach2::vm_region::{vm_region_basic_info_64, vm_region_info_t, VM_REGION_BASIC_INFO_64};

    /// The introspection hook's signature.
    pub type IntrospectionHook =
        unsafe extern "C" fn(event: std::ffi::c_uint, thread: pthread_t, addr: *mut std::ffi::c_void, size: size_t);

    unsafe extern "C" {
        // libc declares the result non-nullable, but it is NULL when no hook
        // was installed before, so it is declared here with `Option`.
        pub fn pthread_introspection_hook_install(hook: IntrospectionHook) -> Option<IntrospectionHook>;
    }
}

#[cfg(not(target_vendor = "apple"))]
mod imp {
    pub use crate::platform::machsim::*;
    pub use libc::{
        clock_gettime, dladdr, dlopen, getpid, pthread_self, pthread_t, size_t, timespec, Dl_info,
        CLOCK_THREAD_CPUTIME_ID, RTLD_NODELETE, RTLD_NOLOAD, RTLD_NOW,
    };
}

pub use imp::*;
