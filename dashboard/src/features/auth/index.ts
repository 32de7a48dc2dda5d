export { SignInPage } from './components/SignInPage';
export { SignOutButton } from './components/SignOutButton';
