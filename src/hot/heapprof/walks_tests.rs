//! The check against hand-made stacks, each walked as `cfi` walks (the memo's effects, the same
//! hooks): a kept walk comes back only where the stack leads the same way, moved or not.

use super::*;
use framehop::x86_64::UnwindRegsX86_64;

const MAX_FRAMES: usize = 64;
type Walks = super::Walks<MAX_FRAMES>;

/// A stack of 8-byte words; frame i of an "sp + 32" chain has its return address at word
/// 4i + 3.
fn stack(ras: &[u64], extra: usize) -> Vec<u64> {
    let mut v = vec![0u64; 4 * ras.len() + 4 + extra];
    for (i, ra) in ras.iter().enumerate() {
        v[4 * i + 3] = *ra;
    }
    v
}

fn bounds(v: &[u64]) -> (u64, u64) {
    let lo = v.as_ptr() as u64;
    (lo, lo + 8 * v.len() as u64)
}

fn reader(v: &[u64]) -> impl FnMut(u64) -> Result<u64, ()> + '_ {
    let (lo, hi) = bounds(v);
    move |a| {
        if a < lo || a + 8 > hi {
            return Err(());
        }
        // SAFETY: a..a+8 lies inside `v` (checked).
        Ok(unsafe { (a as *const u64).read_unaligned() })
    }
}

/// Walks `v` from (ip, sp = start of `v` + `at` words, bp) as cfi's loop does, each frame's
/// effect given by `effect(pc)`, recording into `w`; keeps it. Returns the frames.
fn walk(w: &mut Walks, v: &[u64], at: usize, ip: u64, bp: u64, effect: &dyn Fn(u64) -> Effect) -> Vec<usize> {
    let (lo, hi) = bounds(v);
    let sp = lo + 8 * at as u64;
    let mut regs = UnwindRegsX86_64::new(ip, sp, bp);
    let mut read = reader(v);
    w.start(ip, sp, hi);
    let mut out = vec![];
    let mut pc = ip;
    loop {
        out.push(pc as usize);
        let e = effect(pc);
        w.frame(pc, e, regs.sp(), regs.bp());
        let next = e.unwind(&mut regs, &mut read);
        w.unwound(next, &mut read);
        match next {
            Some(n) if regs.sp() < hi => pc = n,
            _ => break,
        }
    }
    let _ = w.keep(out.len(), 7);
    out
}

fn check(w: &Walks, v: &[u64], at: usize, ip: u64, bp: u64, generation: u32) -> Option<Vec<usize>> {
    let (lo, hi) = bounds(v);
    let mut out = [0usize; MAX_FRAMES];
    let (n, _) = w.check((ip, lo + 8 * at as u64, bp), hi, generation, &mut out, 0)?;
    Some(out[..n].to_vec())
}

fn sp32(_: u64) -> Effect {
    Effect::offset_sp(32)
}

#[test]
fn the_same_words_give_the_kept_frames_on_any_stack() {
    let mut w = new_walks();
    // Three frames, then a zero return address ends the walk.
    let v = stack(&[0x2000, 0x3000, 0], 0);
    let frames = walk(&mut w, &v, 0, 0x1000, 0, &sp32);
    assert_eq!(frames, vec![0x1000, 0x2000, 0x3000]);
    assert_eq!(check(&w, &v, 0, 0x1000, 0, 7), Some(frames.clone()));
    // The same words on another thread's stack (another address, same depth).
    let v2 = v.clone();
    assert_eq!(check(&w, &v2, 0, 0x1000, 0, 7), Some(frames));
}

#[test]
fn a_kept_walk_remembers_its_stack_id_until_it_is_replaced() {
    let mut w = new_walks();
    let v = stack(&[0x2000, 0x3000, 0], 0);
    let frames = walk(&mut w, &v, 0, 0x1000, 0, &sp32);
    let (lo, hi) = bounds(&v);
    let mut out = [0usize; MAX_FRAMES];
    let (n, at) = w.check((0x1000, lo, 0), hi, 7, &mut out, 0).unwrap();
    assert_eq!((&out[..n], w.stack(at)), (&frames[..], None), "frames written while the id is unknown");
    w.set_stack(at, 41);
    let mut out = [0usize; MAX_FRAMES];
    assert_eq!(w.check((0x1000, lo, 0), hi, 7, &mut out, 0), Some((3, at)));
    assert_eq!((w.stack(at), out[0]), (Some(41), 0), "the id stands for the frames: none written");
    // Below other frames (n0 > 0) the frames are written all the same.
    assert_eq!(w.check((0x1000, lo, 0), hi, 7, &mut out, 1), Some((4, at)));
    assert_eq!(&out[1..4], &frames[..]);
    // The same first frame and depth walked again with another caller replaces it: id forgotten.
    let v2 = stack(&[0x2000, 0x3001, 0], 0);
    walk(&mut w, &v2, 0, 0x1000, 0, &sp32);
    assert_eq!(w.stack(at), None);
}

#[test]
fn another_caller_generation_first_frame_or_depth_is_a_miss() {
    let mut w = new_walks();
    let v = stack(&[0x2000, 0x3000, 0], 0);
    walk(&mut w, &v, 0, 0x1000, 0, &sp32);
    assert_eq!(check(&w, &stack(&[0x2000, 0x3001, 0], 0), 0, 0x1000, 0, 7), None, "another caller");
    assert_eq!(check(&w, &v, 0, 0x1000, 0, 8), None, "another generation");
    assert_eq!(check(&w, &v, 0, 0x1001, 0, 7), None, "another first frame");
    assert_eq!(check(&w, &stack(&[0x2000, 0x3000, 0], 4), 0, 0x1000, 0, 7), None, "another depth");
}

#[test]
fn a_stack_that_goes_on_where_the_walk_ended_is_a_miss() {
    let mut w = new_walks();
    let v = stack(&[0x2000, 0x3000, 0, 0], 0);
    assert_eq!(walk(&mut w, &v, 0, 0x1000, 0, &sp32).len(), 3);
    // Same depth and first frames, but the third frame returns somewhere: the walk goes on.
    let v2 = stack(&[0x2000, 0x3000, 0x4000, 0], 0);
    assert_eq!(check(&w, &v2, 0, 0x1000, 0, 7), None);
    assert_eq!(walk(&mut w, &v2, 0, 0x1000, 0, &sp32).len(), 4);
}

#[test]
fn a_spoiled_walk_is_not_kept() {
    let mut w = new_walks();
    let v = stack(&[0x2000, 0x3000, 0], 0);
    let (lo, hi) = bounds(&v);
    w.start(0x1000, lo, hi);
    w.frame(0x1000, Effect::offset_sp(32), lo, 0);
    w.spoil();
    w.keep(1, 7);
    assert_eq!(check(&w, &v, 0, 0x1000, 0, 7), None);
    // A frame written without an effect recorded (framehop unwound it): not kept either.
    w.start(0x1000, lo, hi);
    w.frame(0x1000, Effect::offset_sp(32), lo, 0);
    w.keep(2, 7);
    assert_eq!(check(&w, &v, 0, 0x1000, 0, 7), None);
}

/// Frames by frame pointer: frame 0 at word `at` has %rbp pointing at word at + 2 (saved %rbp
/// there, the return address above it); frame 1 the same two words higher; frame 2 ends.
fn fp_stack(at: usize, extra: usize) -> Vec<u64> {
    let mut v = vec![0u64; at + 12 + extra];
    let base = v.as_ptr() as u64;
    v[at + 2] = base + 8 * (at as u64 + 6); // frame 1's %rbp
    v[at + 3] = 0x2000;
    v[at + 6] = 0; // frame 2's %rbp (unused)
    v[at + 7] = 0x3000;
    v
}

fn fp_effect(pc: u64) -> Effect {
    if pc == 0x3000 {
        Effect::offset_sp(8)
    } else {
        Effect::frame_pointer()
    }
}

#[test]
fn frame_pointer_walks_are_checked_through_rbp_and_move_with_the_stack() {
    let mut w = new_walks();
    let v = fp_stack(0, 0);
    let base = v.as_ptr() as u64;
    let frames = walk(&mut w, &v, 0, 0x1000, base + 16, &fp_effect);
    assert_eq!(frames, vec![0x1000, 0x2000, 0x3000]);
    assert_eq!(check(&w, &v, 0, 0x1000, base + 16, 7), Some(frames.clone()));
    // The same stack elsewhere (its saved %rbp moved with it): the same frames.
    let v2 = fp_stack(0, 0);
    let b2 = v2.as_ptr() as u64;
    assert_eq!(check(&w, &v2, 0, 0x1000, b2 + 16, 7), Some(frames));
    // Another first %rbp, or another saved one: a miss (the walk would read elsewhere).
    assert_eq!(check(&w, &v2, 0, 0x1000, b2 + 24, 7), None);
    let mut v3 = fp_stack(0, 0);
    v3[2] += 8;
    let b3 = v3.as_ptr() as u64;
    assert_eq!(check(&w, &v3, 0, 0x1000, b3 + 16, 7), None);
}

#[test]
fn a_frame_pointer_outside_the_stack_is_not_kept() {
    let mut w = new_walks();
    let v = fp_stack(0, 0);
    let base = v.as_ptr() as u64;
    // %rbp below the first stack pointer: its value is not a stack offset a check can stand for.
    let _ = walk(&mut w, &v, 0, 0x1000, base.wrapping_sub(64), &fp_effect);
    assert_eq!(check(&w, &v, 0, 0x1000, base.wrapping_sub(64), 7), None);
}
