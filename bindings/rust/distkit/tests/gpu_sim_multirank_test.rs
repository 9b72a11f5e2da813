//! Every rank of an "nccl" job on the CUDA + NCCL simulator (testing/gpu_sim)
//! uses the Rust binding on device memory: all_reduce (sum, mean, max),
//! broadcast and all_gather of `DeviceSlice`s, the group's comm device, the
//! caller's stream followed, a Reducer whose buckets are on the device.
//! Device memory comes from the CUDA runtime the
//! way a Rust GPU crate would get it, here from the library
//! DISTKIT_CUDART_LIBRARY names. Exits non-zero on the first mismatch.
mod reducer_check;

use std::ffi::{c_char, c_int, c_void, CString};

use distkit::{Device, DeviceSlice, ReduceOp};

extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}
const RTLD_NOW: c_int = 2;
const H2D: c_int = 1;
const D2H: c_int = 2;

/// The CUDA runtime calls the test makes.
struct Cuda {
    set_device: extern "C" fn(c_int) -> c_int,
    malloc: extern "C" fn(*mut *mut c_void, usize) -> c_int,
    free: extern "C" fn(*mut c_void) -> c_int,
    memcpy: extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> c_int,
    memcpy_async: extern "C" fn(*mut c_void, *const c_void, usize, c_int, *mut c_void) -> c_int,
    stream_create: extern "C" fn(*mut *mut c_void, u32) -> c_int,
    stream_sync: extern "C" fn(*mut c_void) -> c_int,
}

fn fail(what: String) -> ! {
    eprintln!("FAILED: {what}");
    std::process::exit(1)
}

fn load_cuda() -> Cuda {
    let path = std::env::var("DISTKIT_CUDART_LIBRARY")
        .unwrap_or_else(|_| fail("DISTKIT_CUDART_LIBRARY names the simulator".into()));
    let path = CString::new(path).unwrap();
    let lib = unsafe { dlopen(path.as_ptr(), RTLD_NOW) };
    if lib.is_null() {
        fail("dlopen DISTKIT_CUDART_LIBRARY".into());
    }
    let sym = |name: &str| {
        let c = CString::new(name).unwrap();
        let f = unsafe { dlsym(lib, c.as_ptr()) };
        if f.is_null() {
            fail(format!("{name} in the CUDA runtime"));
        }
        f
    };
    unsafe {
        Cuda {
            set_device: std::mem::transmute(sym("cudaSetDevice")),
            malloc: std::mem::transmute(sym("cudaMalloc")),
            free: std::mem::transmute(sym("cudaFree")),
            memcpy: std::mem::transmute(sym("cudaMemcpy")),
            memcpy_async: std::mem::transmute(sym("cudaMemcpyAsync")),
            stream_create: std::mem::transmute(sym("cudaStreamCreateWithFlags")),
            stream_sync: std::mem::transmute(sym("cudaStreamSynchronize")),
        }
    }
}

/// `n` f32 on the device, owned.
struct Buffer<'c> {
    cuda: &'c Cuda,
    ptr: *mut f32,
    n: usize,
    device: Device,
}

impl<'c> Buffer<'c> {
    fn new(cuda: &'c Cuda, n: usize, device: Device) -> Self {
        let mut p = std::ptr::null_mut();
        if (cuda.malloc)(&mut p, n * 4) != 0 {
            fail("cudaMalloc".into());
        }
        Buffer { cuda, ptr: p as *mut f32, n, device }
    }
    fn upload(&self, v: &[f32]) {
        // Blocking: the legacy stream, then its end (cudaMemcpy from
        // pageable memory may return before the device has the bytes).
        if (self.cuda.memcpy)(self.ptr as *mut c_void, v.as_ptr() as *const c_void, v.len() * 4, H2D) != 0
            || (self.cuda.stream_sync)(std::ptr::null_mut()) != 0
        {
            fail("upload".into());
        }
    }
    fn read(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.n];
        if (self.cuda.memcpy)(out.as_mut_ptr() as *mut c_void, self.ptr as *const c_void, self.n * 4, D2H) != 0 {
            fail("download".into());
        }
        out
    }
    fn slice(&self) -> DeviceSlice<f32> {
        unsafe { DeviceSlice::from_raw(self.ptr, self.n, self.device) }
    }
}

impl Drop for Buffer<'_> {
    fn drop(&mut self) {
        (self.cuda.free)(self.ptr as *mut c_void);
    }
}

fn value(rank: i32, i: usize) -> f32 {
    ((rank * 3 + i as i32) % 11 - 5) as f32
}

fn main() {
    let options = distkit::InitOptions { backend: "nccl".to_string(), ..Default::default() };
    let world = distkit::init("pytorch", &options).unwrap_or_else(|e| fail(format!("init on nccl: {e}")));
    let (rank, size) = (world.rank(), world.size());
    let device = world.comm_device().unwrap_or_else(|e| fail(format!("comm_device: {e}")));
    let Device::Cuda(index) = device else { fail(format!("comm device {device:?}")) };
    let cuda = load_cuda();
    (cuda.set_device)(index);
    let n = 1000;
    let mine: Vec<f32> = (0..n).map(|i| value(rank, i)).collect();
    let buf = Buffer::new(&cuda, n, device);

    for (op, name) in [(ReduceOp::Sum, "sum"), (ReduceOp::Mean, "mean"), (ReduceOp::Max, "max")] {
        buf.upload(&mine);
        world.all_reduce_device(&mut buf.slice(), op).unwrap_or_else(|e| fail(format!("all_reduce {name}: {e}")));
        let got = buf.read();
        for (i, g) in got.iter().enumerate() {
            let all: Vec<f32> = (0..size).map(|r| value(r, i)).collect();
            let want = match name {
                "sum" => all.iter().sum::<f32>(),
                "mean" => all.iter().sum::<f32>() / size as f32,
                _ => all.iter().cloned().fold(f32::MIN, f32::max),
            };
            if (g - want).abs() > 1e-5 {
                fail(format!("all_reduce {name}[{i}]: got {g}, want {want}"));
            }
        }
    }
    buf.upload(&mine);
    world.broadcast_device(&mut buf.slice(), size - 1).unwrap_or_else(|e| fail(format!("broadcast: {e}")));
    for (i, g) in buf.read().iter().enumerate() {
        if *g != value(size - 1, i) {
            fail(format!("broadcast[{i}]: got {g}"));
        }
    }
    buf.upload(&mine);
    let all = Buffer::new(&cuda, n * size as usize, device);
    world.all_gather_device(&buf.slice(), &mut all.slice()).unwrap_or_else(|e| fail(format!("all_gather: {e}")));
    for (i, g) in all.read().iter().enumerate() {
        if *g != value((i / n) as i32, i % n) {
            fail(format!("all_gather[{i}]: got {g}"));
        }
    }
    // The caller's stream: the input written there just before.
    let mut stream = std::ptr::null_mut();
    if (cuda.stream_create)(&mut stream, 1) != 0 {
        fail("cudaStreamCreateWithFlags".into());
    }
    unsafe { world.set_cuda_stream(stream) }.unwrap_or_else(|e| fail(format!("set_cuda_stream: {e}")));
    let next: Vec<f32> = (0..n).map(|i| value(rank + 1, i)).collect();
    for at in (0..n).step_by(n / 4) {
        let bytes = (n / 4) * 4;
        let dst = unsafe { buf.ptr.add(at) } as *mut c_void;
        let src = unsafe { next.as_ptr().add(at) } as *const c_void;
        if (cuda.memcpy_async)(dst, src, bytes, H2D, stream) != 0 {
            fail("cudaMemcpyAsync".into());
        }
    }
    world.all_reduce_device(&mut buf.slice(), ReduceOp::Sum).unwrap_or_else(|e| fail(format!("all_reduce on the caller's stream: {e}")));
    if size == 1 {
        (cuda.stream_sync)(stream); // nothing moved: read after the caller's stream
    }
    for (i, g) in buf.read().iter().enumerate() {
        let want: f32 = (0..size).map(|r| value(r + 1, i)).sum();
        if *g != want {
            fail(format!("the all_reduce did not follow the caller's stream: [{i}] = {g}, want {want}"));
        }
    }
    unsafe { world.set_cuda_stream(std::ptr::null_mut()) }.unwrap();
    (cuda.stream_sync)(stream);
    // The Reducer's buckets live on the comm device: a parameter this rank
    // did not use still gets the others' average, copied from the device.
    reducer_check::unused_parameters(&world, rank, size);
    reducer_check::abandoned_iteration(&world, rank, size);
    println!("rank {rank}: the Rust binding on device memory (nccl on the simulator): passed");
}
