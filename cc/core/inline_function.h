// InlineFunction<R(Args...), N>: a move-only callable like std::function
// that holds a callable of up to N bytes in place, without allocating
// (larger ones go to the heap). For what runs on every operation: a group's
// operation bodies capture the group, one or two tensor views and a root or
// a reduction, past std::function's 16 bytes in place, so each call
// allocated and freed its body (tools/dkbench RESULTS.md, "The cost of
// safety, second pass").

#ifndef DISTKIT_CC_CORE_INLINE_FUNCTION_H_
#define DISTKIT_CC_CORE_INLINE_FUNCTION_H_

#include <cassert>
#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace distkit {

// kHeap false: a callable that does not fit in place is a compile error
// (for callers whose point is to never allocate).
template <typename Signature, size_t kInlineBytes, bool kHeap = true>
class InlineFunction;

template <typename R, typename... Args, size_t kInlineBytes, bool kHeap>
class InlineFunction<R(Args...), kInlineBytes, kHeap> {
  static_assert(kInlineBytes >= sizeof(void*), "room for the heap pointer");

 public:
  InlineFunction() = default;
  template <typename F,
            typename = std::enable_if_t<
                !std::is_same_v<std::decay_t<F>, InlineFunction> &&
                std::is_invocable_r_v<R, std::decay_t<F>&, Args...>>>
  InlineFunction(F&& f) {  // NOLINT: implicit, as std::function's
    using T = std::decay_t<F>;
    static_assert(kHeap || FitsInline<T>(),
                  "the callable's captures do not fit in place");
    if constexpr (FitsInline<T>()) {
      new (storage_) T(std::forward<F>(f));
      ops_ = &kInlineOps<T>;
    } else {
      new (storage_) T*(new T(std::forward<F>(f)));
      ops_ = &kHeapOps<T>;
    }
  }
  InlineFunction(InlineFunction&& other) noexcept { TakeFrom(other); }
  InlineFunction& operator=(InlineFunction&& other) noexcept {
    if (this != &other) {
      Reset();
      TakeFrom(other);
    }
    return *this;
  }
  InlineFunction(const InlineFunction&) = delete;
  InlineFunction& operator=(const InlineFunction&) = delete;
  ~InlineFunction() { Reset(); }

  explicit operator bool() const { return ops_ != nullptr; }
  // Calling an empty function is a bug (std::function throws there).
  R operator()(Args... args) const {
    assert(ops_ != nullptr);
    return ops_->invoke(storage_, std::forward<Args>(args)...);
  }

 private:
  // What a held callable of one type needs, as functions over the storage.
  struct Ops {
    R (*invoke)(void* storage, Args&&... args);
    // Moves the callable from `from` into the empty `to`, leaving `from`
    // empty.
    void (*move)(void* from, void* to);
    void (*destroy)(void* storage);
  };

  template <typename T>
  static constexpr bool FitsInline() {
    return sizeof(T) <= kInlineBytes &&
           alignof(T) <= alignof(std::max_align_t) &&
           std::is_nothrow_move_constructible_v<T>;
  }
  template <typename T>
  static constexpr Ops kInlineOps = {
      [](void* s, Args&&... args) -> R {
        return (*std::launder(static_cast<T*>(s)))(std::forward<Args>(args)...);
      },
      [](void* from, void* to) {
        T* held = std::launder(static_cast<T*>(from));
        new (to) T(std::move(*held));
        held->~T();
      },
      [](void* s) { std::launder(static_cast<T*>(s))->~T(); },
  };
  template <typename T>
  static constexpr Ops kHeapOps = {
      [](void* s, Args&&... args) -> R {
        return (**static_cast<T**>(s))(std::forward<Args>(args)...);
      },
      [](void* from, void* to) { new (to) T*(*static_cast<T**>(from)); },
      [](void* s) { delete *static_cast<T**>(s); },
  };

  void TakeFrom(InlineFunction& other) {
    if (other.ops_ == nullptr) return;
    other.ops_->move(other.storage_, storage_);
    ops_ = other.ops_;
    other.ops_ = nullptr;
  }
  void Reset() {
    if (ops_ != nullptr) ops_->destroy(storage_);
    ops_ = nullptr;
  }

  const Ops* ops_ = nullptr;
  // Mutable: calling the holder (const, as std::function) may change what
  // it holds.
  alignas(std::max_align_t) mutable unsigned char storage_[kInlineBytes];
};

}  // namespace distkit

#endif  // DISTKIT_CC_CORE_INLINE_FUNCTION_H_
