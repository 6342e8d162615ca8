use crate::compiler::instructions::Instruction;
use crate::error::{Error, ErrorKind};

/// Helper for tracking fuel consumption
pub struct FuelTracker {
    // The initial fuel level.
    initial: u64,
    remaining: isize,
}

impl FuelTracker {
    /// Creates a new fuel tracker.
    ///
    pub fn new(fuel: u64) -> FuelTracker {
        FuelTracker {
            initial: fuel,
            remaining: fuel as isize,
        }
    }

    /// Tracks an instruction.  If it runs out of fuel an error is returned.
    pub fn track(&mut self, instr: &Instruction) -> Result<(), Error> {
        let fuel_to_consume = fuel_for_instruction(instr);
        if fuel_to_consume != 0 {
            self.remaining -= fuel_to_consume;
            if self.remaining <= 0 {
                return Err(Error::from(ErrorKind::OutOfFuel));
            }
        }
        Ok(())
    }

    /// Charges fuel for a built value of `size` bytes.  If it runs out of fuel an error is
    /// returned.
    pub fn charge(&mut self, size: usize) -> Result<(), Error> {
        let cost = (size / crate::bounds::BYTES_PER_FUEL).min(isize::MAX as usize) as isize;
        self.remaining = self.remaining.saturating_sub(cost);
        if self.remaining <= 0 {
            return Err(Error::new(
                ErrorKind::OutOfFuel,
                "the template builds more than its fuel allows",
            ));
        }
        Ok(())
    }

    /// Returns the remaining fuel.
    pub fn remaining(&self) -> u64 {
        self.remaining as _
    }

    /// Returns the consumed fuel.
    pub fn consumed(&self) -> u64 {
        self.initial.saturating_sub(self.remaining())
    }
}

/// How much fuel does an instruction consume?
fn fuel_for_instruction(instruction: &Instruction) -> isize {
    match instruction {
        Instruction::BeginCapture(_)
        | Instruction::PushLoop(_)
        | Instruction::PushDidNotIterate
        | Instruction::PushWith
        | Instruction::PopFrame
        | Instruction::PopLoopFrame
        | Instruction::DupTop
        | Instruction::DiscardTop
        | Instruction::PushAutoEscape
        | Instruction::PopAutoEscape => 0,
        #[cfg(feature = "multi_template")]
        Instruction::ExportLocals => 0,
        #[cfg(feature = "macros")]
        Instruction::LoadBlocks | Instruction::BuildMacro(..) | Instruction::Return => 0,
        _ => 1,
    }
}

/// Whether an instruction pushes a value it may have built larger than its inputs.
pub(crate) fn builds_value(instruction: &Instruction) -> bool {
    matches!(
        instruction,
        Instruction::Add
            | Instruction::Mul
            | Instruction::StringConcat
            | Instruction::EndCapture
            | Instruction::ApplyFilter(..)
            | Instruction::CallFunction(..)
            | Instruction::CallMethod(..)
            | Instruction::CallObject(..)
    )
}

/// The size a built value is charged for: a string's bytes, a materialised sequence's items
/// (a lazily concatenated one shares its parts and costs nothing until it is materialised).
pub(crate) fn built_size(value: &crate::value::Value) -> usize {
    if let Some(text) = value.as_str() {
        return text.len();
    }
    match value.kind() {
        crate::value::ValueKind::Seq => value.len().unwrap_or(0),
        _ => 0,
    }
}
