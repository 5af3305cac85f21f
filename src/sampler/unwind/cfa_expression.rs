//! One step through a frame whose CFI framehop does not evaluate: a CFA
//! given as a DWARF expression that reads memory, as OpenSSL's assembly
//! does where it realigns the stack (`DW_OP_breg7 rsp+N; DW_OP_deref;
//! DW_OP_plus_uconst 8` in `sha512_block_data_order_avx2` and its kin), or
//! a return address stored at an offset other than CFA-8.
//!
//! Runs on the sampler thread only (gimli's unwind context allocates).
//! Every memory read goes through the caller's `read`, which reads from
//! the stack copy, and the evaluation is capped in steps, so garbage CFI
//! can only make the step fail.

use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameHdr, Encoding, Evaluation, EvaluationResult, Format, LittleEndian,
    Location, Register, RegisterRule, UnwindContext, UnwindSection, Value,
};

/// The registers a stack copy carries, with their DWARF numbers.
#[derive(Clone, Copy, Debug)]
pub struct StepRegs {
    pub sp: u64,
    pub fp: u64,
    pub sp_reg: u16,
    pub fp_reg: u16,
    pub ra_reg: u16,
}

/// The caller's frame: where it returns, its stack pointer and frame pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// `None`: the CFI marks the return address undefined (the root).
    pub ra: Option<u64>,
    pub sp: u64,
    pub fp: u64,
}

/// Expression evaluation steps allowed; real CFA expressions take 3-5.
const MAX_EVAL_STEPS: u32 = 64;

/// Unwinds one frame at `lookup` with the module's `.eh_frame_hdr` and
/// `.eh_frame` (their bytes and process addresses). `None` if there is no
/// FDE, the rules need a register the copy does not have, or a read fails.
pub fn step(
    hdr: &[u8],
    hdr_avma: u64,
    frame: &[u8],
    frame_avma: u64,
    lookup: u64,
    regs: StepRegs,
    read: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Option<Step> {
    let bases = BaseAddresses::default().set_eh_frame_hdr(hdr_avma).set_eh_frame(frame_avma);
    let parsed = EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8).ok()?;
    let table = parsed.table()?;
    let eh_frame = EhFrame::new(frame, LittleEndian);
    let fde = table.fde_for_address(&eh_frame, &bases, lookup, EhFrame::cie_from_offset).ok()?;
    let mut ctx = Box::new(UnwindContext::new());
    let row = fde.unwind_info_for_address(&eh_frame, &bases, &mut ctx, lookup).ok()?;
    let encoding = Encoding { address_size: 8, format: Format::Dwarf32, version: 4 };

    let cfa = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => {
            register_value(*register, &regs)?.checked_add_signed(*offset)?
        }
        CfaRule::Expression(expr) => {
            let bytes = expr.get(&eh_frame).ok()?;
            evaluate(bytes.0, encoding, &regs, read)?
        }
    };
    let ra = match row.register(Register(regs.ra_reg)) {
        Some(RegisterRule::Undefined) => return Some(Step { ra: None, sp: cfa, fp: regs.fp }),
        Some(RegisterRule::Offset(o)) => read(cfa.checked_add_signed(o)?).ok()?,
        _ => return None,
    };
    let fp = match row.register(Register(regs.fp_reg)) {
        None | Some(RegisterRule::Undefined) | Some(RegisterRule::SameValue) => regs.fp,
        Some(RegisterRule::Offset(o)) => read(cfa.checked_add_signed(o)?).ok()?,
        Some(RegisterRule::ValOffset(o)) => cfa.checked_add_signed(o)?,
        _ => return None,
    };
    Some(Step { ra: Some(ra), sp: cfa, fp })
}

fn register_value(register: Register, regs: &StepRegs) -> Option<u64> {
    if register.0 == regs.sp_reg {
        Some(regs.sp)
    } else if register.0 == regs.fp_reg {
        Some(regs.fp)
    } else {
        None
    }
}

/// Evaluates a CFA expression to the address it computes.
fn evaluate(
    bytes: EndianSlice<'_>,
    encoding: Encoding,
    regs: &StepRegs,
    read: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Option<u64> {
    let mut eval = Evaluation::new(bytes, encoding);
    eval.set_max_iterations(MAX_EVAL_STEPS);
    let mut result = eval.evaluate().ok()?;
    loop {
        result = match result {
            EvaluationResult::Complete => break,
            EvaluationResult::RequiresRegister { register, base_type } if base_type.0 == 0 => {
                let value = register_value(register, regs)?;
                eval.resume_with_register(Value::Generic(value)).ok()?
            }
            EvaluationResult::RequiresMemory { address, size: 8, space: None, base_type } if base_type.0 == 0 => {
                let value = read(address).ok()?;
                eval.resume_with_memory(Value::Generic(value)).ok()?
            }
            _ => return None,
        };
    }
    match eval.as_result() {
        [piece] => match piece.location {
            Location::Address { address } => Some(address),
            _ => None,
        },
        _ => None,
    }
}

type EndianSlice<'a> = gimli::EndianSlice<'a, LittleEndian>;

#[cfg(test)]
mod tests {
    use super::*;

    const REGS: StepRegs = StepRegs { sp: 0x1000, fp: 0x2000, sp_reg: 7, fp_reg: 6, ra_reg: 16 };

    fn eval(bytes: &[u8], read: &mut impl FnMut(u64) -> Result<u64, ()>) -> Option<u64> {
        let encoding = Encoding { address_size: 8, format: Format::Dwarf32, version: 4 };
        evaluate(gimli::EndianSlice::new(bytes, LittleEndian), encoding, &REGS, read)
    }

    #[test]
    fn openssl_realigned_stack_expression() {
        // DW_OP_breg7 +152; DW_OP_deref; DW_OP_plus_uconst 8
        let bytes = [0x77, 0x98, 0x01, 0x06, 0x23, 0x08];
        let mut reads = Vec::new();
        let got = eval(&bytes, &mut |a| {
            reads.push(a);
            Ok(0x5000)
        });
        assert_eq!(got, Some(0x5008));
        assert_eq!(reads, vec![0x1000 + 152]);
    }

    #[test]
    fn a_failed_read_or_unknown_register_fails_the_step() {
        let bytes = [0x77, 0x98, 0x01, 0x06, 0x23, 0x08];
        assert_eq!(eval(&bytes, &mut |_| Err(())), None);
        // DW_OP_breg0 (rax) +0: the copy has no rax.
        assert_eq!(eval(&[0x70, 0x00], &mut |_| Ok(0)), None);
    }

    #[test]
    fn garbage_and_loops_end_without_panicking() {
        // DW_OP_skip -3: an endless loop, capped.
        assert_eq!(eval(&[0x2f, 0xfd, 0xff], &mut |_| Ok(0)), None);
        // 2,000 fixed 12-byte programs, spread over the opcode space.
        for n in 0u32..2000 {
            let bytes: Vec<u8> =
                (0..12).map(|i| (n.wrapping_mul(2654435761).rotate_left(i * 5) & 0xff) as u8).collect();
            let _ = eval(&bytes, &mut |a| Ok(a ^ 0x55));
        }
    }
}
