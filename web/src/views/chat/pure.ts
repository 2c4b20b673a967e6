// A component that re-renders only when a prop changes (shallow comparison): the message
// list re-renders when a conversation is read again, not the messages whose objects are
// the same. (preact/compat's memo, without pulling in compat.)
import { Component, h, type ComponentType } from "preact";

export function shallowEqual(a: object, b: object): boolean {
  const left = a as Record<string, unknown>;
  const right = b as Record<string, unknown>;
  const keys = Object.keys(left);
  if (keys.length !== Object.keys(right).length) return false;
  return keys.every((key) => Object.is(left[key], right[key]));
}

export function pure<P extends object>(inner: ComponentType<P>): ComponentType<P> {
  class Pure extends Component<P> {
    shouldComponentUpdate(next: P): boolean {
      return !shallowEqual(this.props, next);
    }
    render() {
      return h(inner, this.props);
    }
  }
  return Pure as unknown as ComponentType<P>;
}
